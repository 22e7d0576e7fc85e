/* Drawing one run from its event stream: rounds with markdown reasoning, highlighted code, outputs
   (tables, figures, streams, errors), a running indicator with elapsed time, token counts, the answer
   at the top and the downloads. Pure DOM building: no network here (the app passes callbacks). */
"use strict";

window.KA = window.KA || {};

KA.render = (() => {
  const LONG_LINES = 30;  // outputs longer than this start collapsed
  const LIVE_CHARS = 4000;  // of a running round's output shown while it runs (the tail)

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : value);
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  }

  const joined = (value) => (Array.isArray(value) ? value.join("") : String(value ?? ""));
  const stripAnsi = (text) => text.replace(/\x1b\[[0-?]*[ -/]*[@-~]/g, "");
  /* The model's and the kernel's HTML is data: JupyterLab's untrusted-output policy. No forms or inputs
     (a fake "enter your key" form), no style (it can lift an output over the page), no frames, objects,
     meta or base; images only from data (nothing fetched elsewhere). The page's CSP backs this up. */
  const PURIFY = {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ["form", "input", "button", "select", "option", "textarea", "style", "link", "meta", "base",
      "iframe", "frame", "object", "embed", "svg", "math", "dialog", "template"],
    FORBID_ATTR: ["style", "action", "formaction", "srcset", "ping", "background", "poster"],
  };
  const IMAGE_DATA = /^\s*data:image\/(png|jpeg|gif|webp|svg\+xml);base64,/i;
  let hooked = false;
  function sanitize(html) {
    if (!hooked) {  // an image that is not data would be fetched from elsewhere (a beacon): it keeps no source
      DOMPurify.addHook("afterSanitizeAttributes", (node) => {
        if (node.tagName === "IMG" && !IMAGE_DATA.test(node.getAttribute("src") || "")) node.removeAttribute("src");
      });
      hooked = true;
    }
    return DOMPurify.sanitize(html, PURIFY);
  }
  /* An SVG is shown as an image: its scripts and links do not run there. */
  const svgImage = (svg) => el("img", { src: `data:image/svg+xml;base64,${btoa(unescape(encodeURIComponent(svg)))}`, alt: "SVG figure" });

  function markdown(text) {
    const node = el("div", { class: "markdown" });
    node.innerHTML = sanitize(marked.parse(text || ""));
    for (const link of node.querySelectorAll("a")) { link.target = "_blank"; link.rel = "noopener noreferrer"; }
    return node;
  }

  function code(source) {
    const block = el("code", { class: "hljs language-python" });
    block.innerHTML = hljs.highlight(source, { language: "python", ignoreIllegals: true }).value;
    return el("pre", { class: "code" }, block);
  }

  /* A long text starts collapsed, with a button to show it all. */
  function collapsible(node, lines) {
    if (lines <= LONG_LINES) return node;
    node.classList.add("collapsed");
    const button = el("button", { type: "button", class: "expand", "aria-expanded": "false", text: `Show all ${lines} lines` });
    button.addEventListener("click", () => {
      const open = node.classList.toggle("collapsed") === false;
      button.setAttribute("aria-expanded", String(open));
      button.textContent = open ? "Show less" : `Show all ${lines} lines`;
    });
    return el("div", {}, node, button);
  }

  function textBlock(text, kind) {
    const pre = el("pre", { class: `stream ${kind}`, text });
    return collapsible(pre, text.split("\n").length);
  }

  /* An error: with the server's fold (result.fold_traceback), the failing line of the analysed code
     and the exception first, the whole traceback (library frames and all) a press away. */
  function traceback(out) {
    const whole = stripAnsi((out.traceback || []).join("\n")) || `${out.ename}: ${out.evalue}`;
    const folded = out.folded;
    if (!folded || !folded.lead || !folded.lead.length) return el("div", { class: "output" }, textBlock(whole, "stderr"));
    const full = el("pre", { class: "stream stderr traceback-full", text: whole, hidden: true });
    const frames = folded.library.length;
    const label = `Show the whole traceback${frames ? ` (${frames} frame${frames === 1 ? "" : "s"} inside installed packages)` : ""}`;
    const button = el("button", { type: "button", class: "expand", "aria-expanded": "false", text: label });
    button.addEventListener("click", () => {
      full.hidden = !full.hidden;
      button.setAttribute("aria-expanded", String(!full.hidden));
      button.textContent = full.hidden ? label : "Hide the whole traceback";
    });
    return el("div", { class: "output" }, el("pre", { class: "stream stderr traceback-lead", text: folded.lead.join("\n") }), button, full);
  }

  function output(out) {
    const kind = out.output_type;
    if (kind === "stream") return el("div", { class: "output" }, textBlock(joined(out.text), out.name === "stderr" ? "stderr" : "stdout"));
    if (kind === "error") return traceback(out);
    const data = out.data || {};
    const box = el("div", { class: "output" });
    if (data["image/png"] || data["image/jpeg"]) {
      const mime = data["image/png"] ? "image/png" : "image/jpeg";
      box.append(el("img", { src: `data:${mime};base64,${joined(data[mime]).trim()}`, alt: joined(data["text/plain"]) || "figure" }));
    } else if (data["image/svg+xml"]) {
      box.append(svgImage(joined(data["image/svg+xml"])));
    } else if (data["text/html"]) {
      box.innerHTML = sanitize(joined(data["text/html"]));
    } else if (data["text/markdown"]) {
      box.append(markdown(joined(data["text/markdown"])));
    } else if (data["text/plain"] !== undefined) {
      box.append(textBlock(joined(data["text/plain"]), "stdout"));
    }
    return box;
  }

  /* Outputs when the event carries only the flattened result (older servers). */
  function flatOutputs(result) {
    const outs = [];
    if (result.stdout) outs.push({ output_type: "stream", name: "stdout", text: result.stdout });
    if (result.stderr) outs.push({ output_type: "stream", name: "stderr", text: result.stderr });
    if (result.result_text) outs.push({ output_type: "execute_result", data: { "text/plain": result.result_text } });
    if (result.error) outs.push({ output_type: "error", ename: result.error.ename, evalue: result.error.evalue, traceback: [] });
    return outs;
  }

  /* What a terminal shows of text with carriage returns (progress bars): the last part of each line. */
  const resolveReturns = (text) => text.split("\n").map((line) => line.replace(/\r+$/, "").split("\r").pop()).join("\n");

  /* A reply as it streams, readable: the tags of the tags/DeepAnalyze protocols become markdown (code
     in a fence, the rest plain), a tag cut in half at the end of a chunk waits for the next one. The
     parsed reasoning replaces this once the reply is complete (code_ready, round_finished). */
  function readable(text) {
    return text
      .replace(/<Execute>[\s\S]*?(<\/Execute>|$)/g, "")
      .replace(/<Code>\s*(```[\w-]*\n)?/g, "\n```python\n")
      .replace(/\n?```\s*<\/Code>|<\/Code>/g, "\n```\n")
      .replace(/<\/?(Analyze|Understand|Answer|Thinking|Think|File)>/gi, "\n")
      .replace(/<\/?[A-Za-z]*$/, "");
  }

  /* A link that downloads ``url`` with the key, under the name the server gives it (``download(url)``;
     no ``download`` attribute here: the server's Content-Disposition names every file). */
  function downloadLink(url, label, download, onError) {
    return el("a", { href: url, class: "download", text: label, onclick: (event) => {
      event.preventDefault();
      download(url).catch(onError);
    } });
  }

  /* The answer is shown under our own "Answer" heading: drop the model's, if it wrote one. */
  const withoutAnswerHeading = (text) => text.replace(/^\s*#{1,6}\s*(final\s+)?answer\s*:?\s*#*\s*\n/i, "");
  /* A server time (ISO 8601 or unix seconds) in the reader's own words and time zone. */
  function when(value) {
    if (!value) return "";
    const date = new Date(typeof value === "number" ? value * 1000 : value);
    return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  }
  const seconds = (s) => (s < 60 ? `${s.toFixed(s < 10 ? 1 : 0)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`);
  const tokens = (usage) => (usage && usage.total_tokens ? `${usage.total_tokens.toLocaleString()} tokens` : "");

  /* A file the code wrote, named by a path the kernel chose (hostile): shown as text; a link and, for a
     raster image, the image itself, only when ``files`` (the run's) makes them. */
  const IMAGE_FILE = /\.(png|jpe?g|gif|webp)$/i;

  /* One round's card. ``label`` is its heading: "Round 2", or "Round 2 of turn 3" in a follow-up.
     ``files``: {link(path, label) → node or null, image(path) → Promise of a data: URL or null}. */
  class RoundView {
    constructor(label, files = null) {
      this.files = files;
      this.text = "";
      this.tokens = el("span", { class: "tokens" });
      this.reasoning = el("div", { class: "reasoning streaming waiting", "aria-live": "off", text: "waiting for the model…" });
      this.body = el("div");
      this.node = el("article", { class: "round", "aria-label": label },
        el("h3", {}, el("span", { text: label }), this.tokens), this.reasoning, this.body);
      this.timer = null;
      this.drawing = false;
      this.retries = null;
    }
    /* Streamed text is drawn as markdown at most once a frame: a long reply stays cheap to follow. */
    delta(text) {
      this.text += text;
      this.reasoning.classList.remove("waiting");
      if (this.drawing) return;
      this.drawing = true;
      requestAnimationFrame(() => {
        this.drawing = false;
        if (this.reasoning.classList.contains("streaming")) this.reasoning.replaceChildren(markdown(readable(this.text)));
      });
    }
    /* A retried model request: one note for the round, counting the attempts. */
    reset(reason) {
      this.text = "";
      this.reasoning.replaceChildren();
      this.retries = this.retries || { count: 0, node: el("div", { class: "note" }) };
      this.retries.count += 1;
      const times = this.retries.count > 1 ? ` (${this.retries.count} times)` : "";
      this.retries.node.textContent = `Model request failed, retrying${times}: ${reason}`;
      if (!this.retries.node.isConnected) this.body.append(this.retries.node);
    }
    showReasoning(text) {
      this.reasoning.classList.remove("streaming", "waiting");
      this.reasoning.replaceChildren(markdown(text));
    }
    codeReady(event) {
      this.showReasoning(event.reasoning || "");
      this.body.append(code(event.code));
    }
    started(event) {
      this.began = performance.now();
      const limit = event.timeout ? ` (limit ${seconds(event.timeout)})` : "";
      this.exec = el("div", { class: "exec running", role: "status" });
      const tick = () => { this.exec.textContent = `running… ${seconds((performance.now() - this.began) / 1000)}${limit}`; };
      tick();
      this.timer = setInterval(tick, 1000);
      this.body.append(this.exec);
    }
    /* The running code's output so far (execution_output events): one live block holding the tail,
       replaced by the whole outputs when the execution finishes. */
    liveOutput(event) {
      // The server's clock for this execution: right even when the page opened the run mid-execution.
      if (typeof event.elapsed_s === "number") this.began = Math.min(this.began ?? Infinity, performance.now() - event.elapsed_s * 1000);
      this.liveText = (this.liveText || "") + stripAnsi(event.text || "");
      if (this.liveText.length > LIVE_CHARS) { this.liveText = this.liveText.slice(-LIVE_CHARS); this.liveCut = true; }
      this.liveFigures = (this.liveFigures || 0) + (event.figures || 0);
      if (!this.live) {
        this.live = el("pre", { class: "stream stdout live-output", "aria-label": "Output so far" });
        this.body.append(this.live);
      }
      const text = (this.liveCut ? "…" : "") + resolveReturns(this.liveText);
      const figures = this.liveFigures ? `[${this.liveFigures} figure${this.liveFigures === 1 ? "" : "s"} so far]` : "";
      this.live.textContent = text + (figures && text && !text.endsWith("\n") ? "\n" : "") + figures;
      this.live.scrollTop = this.live.scrollHeight;
    }
    finished(event) {
      this.stop();
      if (this.live) { this.live.remove(); this.live = null; this.liveText = ""; this.liveCut = false; this.liveFigures = 0; }
      const result = event.result || {};
      const ok = result.status === "ok";
      let line = `${result.status} · ${seconds(result.duration_s || 0)}`;
      if (result.error) line += ` · ${result.error.ename}: ${result.error.evalue}`;
      if (!this.exec) { this.exec = el("div"); this.body.append(this.exec); }
      this.exec.className = `exec ${ok ? "ok" : "bad"}`;
      this.exec.textContent = line;
      if (result.note) this.body.append(el("div", { class: ok ? "note" : "problem", text: result.note }));
      for (const out of Array.isArray(result.outputs) ? result.outputs : flatOutputs(result)) this.body.append(output(out));
      const files = (event.artifacts || []).map((a) => a.path).filter((path) => typeof path === "string" && path);
      if (files.length) this.body.append(this.written(files));
    }
    /* "Files written:" each a download link, and the images among them shown below the list. */
    written(paths) {
      const list = el("div", { class: "files-written" }, el("span", { class: "muted", text: "Files written:" }));
      const images = el("div", { class: "file-images" });
      for (const path of paths) {
        const link = this.files && this.files.link(path, path);
        list.append(" ", link || el("span", { class: "file-name", text: path }));
        if (link && IMAGE_FILE.test(path)) {
          const figure = el("figure", { class: "file-image", hidden: true },
            el("img", { alt: path }), el("figcaption", { class: "muted", text: path }));
          images.append(figure);
          this.files.image(path).then((url) => {
            if (!url) return;
            figure.querySelector("img").src = url;
            figure.hidden = false;
          }).catch(() => {});  // not shown; its link still downloads it
        }
      }
      return el("div", {}, list, images);
    }
    /* The round ended. The answering round shows what it said besides the answer (the answer itself is
       at the top of its turn, once), and a way there. */
    done(round, toAnswer) {
      this.stop();
      if (round.usage) this.tokens.textContent = tokens(round.usage);
      if (round.answer) {
        this.showReasoning(round.reasoning || "");
        if (!round.reasoning) this.reasoning.hidden = true;
        this.body.append(el("p", { class: "answered muted" }, "Answered: ",
          el("button", { type: "button", class: "link-button", text: "see the answer above", onclick: toAnswer })));
      } else if (!round.code && this.reasoning.classList.contains("streaming")) {
        this.showReasoning(readable(this.text));
      }
    }
    stop() {
      if (this.timer) clearInterval(this.timer);
      this.timer = null;
      if (this.reasoning.classList.contains("waiting")) this.reasoning.textContent = "(no reply from the model)";
      this.reasoning.classList.remove("waiting");
      if (this.exec && this.exec.classList.contains("running")) { this.exec.className = "exec bad"; this.exec.textContent = "stopped"; }
    }
  }

  return { el, markdown, code, output, readable, seconds, tokens, when, withoutAnswerHeading, downloadLink, RoundView };
})();
