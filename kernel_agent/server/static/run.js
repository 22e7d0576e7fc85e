/* One run on the page: its header (task, status, elapsed time, tokens, cancel), the answer at the
   top, the downloads, problems and notes, then its rounds as they happen. Fed by events. */
"use strict";

window.KA = window.KA || {};

KA.RunView = (() => {
  const { el, markdown, seconds, tokens, withoutAnswerHeading, RoundView } = KA.render;
  const DOWNLOADS = [  // [field, label, file name]
    ["notebook", "Notebook (.ipynb)", "analysis.ipynb"],
    ["clean", "Clean notebook", "analysis.clean.ipynb"],
    ["html", "HTML report", "analysis.html"],
  ];

  class RunView {
    /* summary: {id, task?, status?}; actions: {cancel(id), download(url, name)} */
    constructor(summary, actions) {
      this.id = summary.id;
      this.actions = actions;
      this.rounds = new Map();
      this.total = 0;
      this.began = null;
      this.status = el("span", { class: "status", role: "status" });
      this.clock = el("span", { class: "muted" });
      this.usage = el("span", { class: "muted" });
      this.cancelButton = el("button", { type: "button", class: "danger", text: "Cancel", hidden: true,
        onclick: () => this.cancel() });
      this.title = el("h2", { text: summary.task || "Analysis" });
      this.meta = el("div", { class: "run-meta" });
      this.answer = el("section", { class: "card answer", hidden: true, "aria-label": "Answer" });
      this.downloads = el("div", { class: "downloads", hidden: true });
      this.problems = el("div");
      this.list = el("div", { class: "rounds" });
      this.node = el("section", { class: "run", "data-run-id": this.id },
        el("div", { class: "run-head" }, this.title, this.status, this.clock, this.usage, this.cancelButton),
        this.meta, this.answer, this.downloads, this.problems, this.list);
      this.setStatus(summary.status || "queued");
    }

    get running() { return ["queued", "running"].includes(this.state); }

    setStatus(state, detail) {
      this.state = state;
      this.status.className = `status ${state}`;
      this.status.textContent = detail ? `${state} · ${detail}` : state;
      this.cancelButton.hidden = !this.running;
      if (this.running && !this.ticker) {
        this.began = this.began || performance.now();
        const tick = () => { this.clock.textContent = seconds((performance.now() - this.began) / 1000); };
        tick();
        this.ticker = setInterval(tick, 1000);
      } else if (!this.running && this.ticker) {
        clearInterval(this.ticker);
        this.ticker = null;
      }
    }

    async cancel() {
      this.cancelButton.disabled = true;
      this.cancelButton.textContent = "Cancelling…";
      try { await this.actions.cancel(this.id); } catch (error) { this.problem(`Cancel failed: ${error.message}`); }
    }

    /* Stop the clocks (the view is leaving the page; the run itself goes on). */
    dispose() {
      if (this.ticker) clearInterval(this.ticker);
      this.ticker = null;
      for (const view of this.rounds.values()) view.stop();
    }

    problem(text) { this.problems.append(el("div", { class: "problem", role: "alert", text })); }

    round(number) { return this.rounds.get(number); }

    handle(event) {
      const handler = this[`on_${event.event}`];
      if (handler) handler.call(this, event);
    }

    on_run_started(event) {
      this.setStatus("running");
      if (event.task) this.title.textContent = event.task.split("\n\n")[0];
      const parts = [`model ${event.model}`, `protocol ${event.protocol}`];
      if (event.scripted) parts.push("scripted replies");
      this.meta.textContent = parts.join(" · ");
    }
    on_round_started(event) {
      const view = new RoundView(event.round, event.max_rounds);
      this.rounds.set(event.round, view);
      this.list.append(view.node);
    }
    on_text_delta(event) { this.round(event.round)?.delta(event.text); }
    on_text_reset(event) { this.round(event.round)?.reset(event.reason); }
    on_code_ready(event) { this.round(event.round)?.codeReady(event); }
    on_execution_started(event) { this.round(event.round)?.started(event); }
    on_execution_output(event) { this.round(event.round)?.liveOutput(event); }
    on_execution_finished(event) { this.round(event.round)?.finished(event); }
    on_round_finished(event) {
      const round = event.round || {};
      this.round(round.index)?.done(round);
      this.total += (round.usage && round.usage.total_tokens) || 0;
      if (this.total) this.usage.textContent = tokens({ total_tokens: this.total });
    }
    on_answer(event) { this.showAnswer(event.answer); }
    on_notice(event) { this.problems.append(el("div", { class: "note", text: event.message })); }
    on_error(event) { this.problem(`Error: ${event.message}`); }
    on_finished(event) {
      const run = event.run || {};
      for (const view of this.rounds.values()) view.stop();
      if (run.answer) this.showAnswer(run.answer);
      if (run.usage && run.usage.total_tokens) this.usage.textContent = tokens(run.usage);
      const stop = run.stop_reason || "finished";
      this.setStatus(stop === "answer" ? "finished" : stop === "cancelled" ? "cancelled" : "failed", stop === "answer" ? "" : stop);
      if (!run.answer) this.problem(`No answer: the run stopped (${stop})${run.error ? `: ${run.error}` : ""}.`);
    }

    showAnswer(text) {
      this.answer.replaceChildren(el("h3", { text: "Answer" }), markdown(withoutAnswerHeading(text)));
      this.answer.hidden = false;
    }

    /* Fill in what only the run's record has: status and the download links. */
    summary(run) {
      if (run.task && !this.title.textContent) this.title.textContent = run.task;
      const links = [];
      for (const [field, label, name] of DOWNLOADS) {
        const url = findUrl(run, field);
        if (url) links.push(this.link(url, label, name));
      }
      for (const file of run.files || []) {
        const url = file.url || file.download_url;
        const name = file.name || file.path || file.filename;
        if (url && name) links.push(this.link(url, name, name.split("/").pop()));
      }
      this.downloads.replaceChildren(...links);
      this.downloads.hidden = links.length === 0;
    }

    link(url, label, name) {
      return el("a", { href: url, download: name, text: label, onclick: (event) => {
        event.preventDefault();
        this.actions.download(url, name).catch((error) => this.problem(`Download failed: ${error.message}`));
      } });
    }
  }

  /* The URL of one download, wherever this server version puts it. */
  function findUrl(run, field) {
    const places = [run.urls, run.links, run.notebooks, run.downloads, run];
    for (const place of places) {
      if (!place || typeof place !== "object") continue;
      for (const key of [field, `${field}_url`, `${field}_notebook`, `${field}_notebook_url`]) {
        if (typeof place[key] === "string") return place[key];
      }
    }
    return null;
  }

  return RunView;
})();
