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
  const sanitize = (html) => DOMPurify.sanitize(html, { USE_PROFILES: { html: true } });

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

  function output(out) {
    const kind = out.output_type;
    if (kind === "stream") return el("div", { class: "output" }, textBlock(joined(out.text), out.name === "stderr" ? "stderr" : "stdout"));
    if (kind === "error") {
      const trace = stripAnsi((out.traceback || []).join("\n")) || `${out.ename}: ${out.evalue}`;
      return el("div", { class: "output" }, textBlock(trace, "stderr"));
    }
    const data = out.data || {};
    const box = el("div", { class: "output" });
    if (data["image/png"] || data["image/jpeg"]) {
      const mime = data["image/png"] ? "image/png" : "image/jpeg";
      box.append(el("img", { src: `data:${mime};base64,${joined(data[mime]).trim()}`, alt: joined(data["text/plain"]) || "figure" }));
    } else if (data["image/svg+xml"]) {
      box.innerHTML = sanitize(joined(data["image/svg+xml"]));
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

  /* The answer is shown under our own "Answer" heading: drop the model's, if it wrote one. */
  const withoutAnswerHeading = (text) => text.replace(/^\s*#{1,6}\s*(final\s+)?answer\s*:?\s*#*\s*\n/i, "");
  const seconds = (s) => (s < 60 ? `${s.toFixed(s < 10 ? 1 : 0)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`);
  const tokens = (usage) => (usage && usage.total_tokens ? `${usage.total_tokens.toLocaleString()} tokens` : "");

  /* One round's card. */
  class RoundView {
    constructor(number, max) {
      this.text = "";
      this.tokens = el("span", { class: "tokens" });
      this.reasoning = el("div", { class: "reasoning streaming waiting", "aria-live": "off", text: "waiting for the model…" });
      this.body = el("div");
      this.node = el("article", { class: "round", "aria-label": `Round ${number}` },
        el("h3", {}, el("span", { text: `Round ${number}${max ? ` / ${max}` : ""}` }), this.tokens), this.reasoning, this.body);
      this.timer = null;
    }
    delta(text) {
      this.text += text;
      this.reasoning.classList.remove("waiting");
      this.reasoning.textContent = this.text;
    }
    reset(reason) {
      this.text = "";
      this.reasoning.textContent = "";
      this.body.append(el("div", { class: "note", text: `Model request failed, retrying: ${reason}` }));
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
      const began = performance.now();
      const limit = event.timeout ? ` (limit ${seconds(event.timeout)})` : "";
      this.exec = el("div", { class: "exec running", role: "status" });
      const tick = () => { this.exec.textContent = `running… ${seconds((performance.now() - began) / 1000)}${limit}`; };
      tick();
      this.timer = setInterval(tick, 1000);
      this.body.append(this.exec);
    }
    /* The running code's output so far (execution_output events): one live block holding the tail,
       replaced by the whole outputs when the execution finishes. */
    liveOutput(event) {
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
      const files = (event.artifacts || []).map((a) => a.path).filter(Boolean);
      if (files.length) this.body.append(el("div", { class: "muted", text: `Files written: ${files.join(", ")}` }));
    }
    done(round) {
      this.stop();
      if (round.usage) this.tokens.textContent = tokens(round.usage);
      if (!round.code && this.reasoning.classList.contains("streaming")) this.showReasoning(withoutAnswerHeading(round.answer || this.text));
    }
    stop() {
      if (this.timer) clearInterval(this.timer);
      this.timer = null;
      if (this.reasoning.classList.contains("waiting")) this.reasoning.textContent = "(no reply from the model)";
      this.reasoning.classList.remove("waiting");
      if (this.exec && this.exec.classList.contains("running")) { this.exec.className = "exec bad"; this.exec.textContent = "stopped"; }
    }
  }

  return { el, markdown, code, output, seconds, tokens, withoutAnswerHeading, RoundView };
})();
