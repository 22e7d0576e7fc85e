/* Data files for a run, on a form: a drop zone (or the file picker), each file checked on arrival
   (empty, over the server's upload limit, a binary file of a kind the agent does not read, a file the
   browser cannot read) with the reason next to it, the rest uploaded at once. Used by the new-analysis
   form and the follow-up form alike. The checks use what the server says in /v1/info. */
"use strict";

window.KA = window.KA || {};

KA.Uploads = (() => {
  const { el } = KA.render;
  const SNIFF_BYTES = 8192;  // looked at for NUL bytes, as the server's summaries look at a file's head

  const size = (bytes) => (bytes < 1024 ? `${bytes} B` : bytes < 1048576 ? `${(bytes / 1024).toFixed(1)} KB` : `${(bytes / 1048576).toFixed(1)} MB`);
  const suffix = (name) => { const dot = name.lastIndexOf("."); return dot > 0 ? name.slice(dot).toLowerCase() : ""; };

  class Uploads {
    /* zone, input, list: the form's elements; upload(file) → Promise of the file record;
       onChange(): called whenever the set or its state changes. */
    constructor({ zone, input, list, upload, onChange }) {
      this.list = list;
      this.upload = upload;
      this.onChange = onChange || (() => {});
      this.entries = [];
      this.limits = { maxBytes: null, suffixes: null };
      zone.addEventListener("click", () => input.click());
      zone.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); input.click(); }
      });
      input.addEventListener("change", () => { this.add(Array.from(input.files)); input.value = ""; });
      for (const name of ["dragenter", "dragover"]) {
        zone.addEventListener(name, (event) => { event.preventDefault(); zone.classList.add("dragging"); });
      }
      for (const name of ["dragleave", "drop"]) zone.addEventListener(name, () => zone.classList.remove("dragging"));
      zone.addEventListener("drop", (event) => { event.preventDefault(); this.add(Array.from(event.dataTransfer.files)); });
    }

    /* What the server accepts: its upload limit in bytes and the suffixes its summaries know. */
    configure(info) {
      this.limits = { maxBytes: info.max_upload_bytes || null, suffixes: info.data_suffixes || null };
    }

    get pending() { return this.entries.some((entry) => entry.state === "uploading" || entry.state === "checking"); }
    get ids() { return this.entries.filter((entry) => entry.state === "done").map((entry) => entry.id); }

    clear() {
      for (const entry of this.entries) entry.node.remove();
      this.entries = [];
      this.onChange();
    }

    add(files) {
      for (const file of files) {
        const entry = { file, id: null, state: "checking" };
        entry.node = el("li", { class: "uploading" }, el("span", { text: `${file.name} · checking…` }));
        this.entries.push(entry);
        this.list.append(entry.node);
        this.check(file).then((reason) => (reason ? this.refuse(entry, reason) : this.send(entry)));
      }
      this.onChange();
    }

    /* Why ``file`` cannot be analysed, or "" when it can. */
    async check(file) {
      if (file.size === 0) return "refused: the file is empty";
      const { maxBytes, suffixes } = this.limits;
      if (maxBytes && file.size > maxBytes) return `refused: larger than this server's ${size(maxBytes)} upload limit`;
      let head;
      try {
        head = new Uint8Array(await file.slice(0, SNIFF_BYTES).arrayBuffer());
      } catch (_) {
        return "refused: the browser cannot read it (a folder?)";
      }
      if (suffixes && !suffixes.includes(suffix(file.name)) && head.includes(0)) {
        return `refused: a binary ${suffix(file.name) || "file"} file, of a kind the analysis does not read`;
      }
      return "";
    }

    refuse(entry, reason) {
      entry.state = "refused";
      entry.node.className = "refused";
      entry.node.replaceChildren(el("span", { text: entry.file.name }), el("span", { class: "reason", role: "alert", text: reason }),
        this.removeButton(entry));
      this.onChange();
    }

    send(entry) {
      entry.state = "uploading";
      entry.node.firstChild.textContent = `${entry.file.name} · uploading…`;
      this.upload(entry.file).then((uploaded) => {
        entry.id = uploaded.id;
        entry.state = "done";
        entry.node.className = "";
        entry.node.replaceChildren(el("span", { text: `${uploaded.filename || entry.file.name} · ${size(uploaded.bytes ?? entry.file.size)}` }),
          this.removeButton(entry));
      }).catch((error) => this.refuse(entry, `refused by the server: ${error.message}`)).finally(() => this.onChange());
    }

    removeButton(entry) {
      return el("button", { type: "button", "aria-label": `Remove ${entry.file.name}`, text: "×", onclick: () => this.remove(entry) });
    }

    remove(entry) {
      this.entries = this.entries.filter((item) => item !== entry);
      entry.node.remove();
      this.onChange();
    }
  }

  Uploads.size = size;
  return Uploads;
})();
