/* One run on the page: its header (its own question, one status, its times from the server's record,
   tokens, cancel), the answer at the top (once), one place for why it failed, notes, then its rounds as
   they happen, numbered within the run's turn, with the files their code wrote as links (images shown).
   Fed by events and the run's record. The thread's own downloads are the page's (app.js), not a run's. */
"use strict";

window.KA = window.KA || {};

KA.RunView = (() => {
  const { el, markdown, seconds, tokens, when, withoutAnswerHeading, RoundView } = KA.render;
  const SHOWN_IMAGE_BYTES = 8 * 1024 * 1024;  // a bigger image the code wrote is a link only
  const OPEN = ["queued", "running"];
  const sentence = (text) => text.charAt(0).toUpperCase() + text.slice(1);

  /* The status a finished event implies (the service puts the run's own in it; a bare agent stream does not). */
  function finishedStatus(run) {
    if (run.status) return run.status;
    return run.stop_reason === "cancelled" ? "cancelled" : run.stop_reason === "llm_error" || !run.stop_reason ? "failed" : "completed";
  }

  class RunView {
    /* summary: the run's record, or at least {id, task?, status?, thread_id?}; actions: {cancel(id),
       download(url), fetchImage(url, limit) → data: URL or null, changed?(view)}; options: {turn: its place
       in the thread (1 = first), words: stop reason → words, thread: its thread's id}. */
    constructor(summary, actions, options = {}) {
      this.id = summary.id;
      this.thread = summary.thread_id || options.thread || null;
      this.actions = actions;
      this.turn = options.turn || 1;
      this.words = options.words || {};
      this.rounds = new Map();
      this.firstRound = null;
      this.started = false;
      this.total = 0;
      this.elapsed = null;
      this.failures = [];
      this.notes = new Map();
      this.status = el("span", { class: "status", role: "status" });
      this.startedAt = el("span", { class: "muted started" });
      this.clock = el("span", { class: "muted elapsed" });
      this.usage = el("span", { class: "muted" });
      this.cancelButton = el("button", { type: "button", class: "danger", text: "Cancel", hidden: true,
        onclick: () => this.cancel() });
      this.title = el("h2", { class: "run-title", text: summary.task || "Analysis", title: summary.task || null,
        onclick: () => this.title.classList.toggle("whole") });
      this.titled = Boolean(summary.task);
      this.meta = el("div", { class: "run-meta" });
      this.answer = el("section", { class: "card answer", hidden: true, "aria-label": "Answer" });
      this.failure = el("div", { class: "problem failure", role: "alert", hidden: true });
      this.lead = el("div", { class: "lead-notes" });  // what the run said before it started: above the answer
      this.problems = el("div");
      this.list = el("div", { class: "rounds" });
      this.node = el("section", { class: "run", "data-run-id": this.id },
        el("div", { class: "run-head" }, this.title,
          el("div", { class: "run-line" }, this.status, this.startedAt, this.clock, this.usage, this.cancelButton)),
        this.meta, this.lead, this.answer, this.failure, this.problems, this.list);
      this.openWhenShown = OPEN.includes(summary.status || "queued");
      this.setStatus(summary.status || "queued");
      this.ready = true;  // status changes from now on are news to the page
      this.timing(summary);
      if (summary.model) this.describe({ model: summary.model });
    }

    get running() { return OPEN.includes(this.state); }
    /* Running now, not a finished run whose recorded events are being replayed. */
    get live() { return this.running && this.openWhenShown; }

    /* The one status of the run: the record's words (queued, running, completed, failed, cancelled, interrupted). */
    setStatus(state) {
      const changed = state !== this.state;
      this.state = state;
      this.status.className = `status ${state}`;
      this.status.textContent = state;
      this.cancelButton.hidden = !this.running;
      if (!this.running && this.elapsed && !this.elapsed.final) {  // stop the clock where it is; the record corrects it
        this.elapsed = { base: this.now(), at: performance.now(), final: true };
      }
      this.tickClock();
      if (changed && this.ready && this.actions.changed) this.actions.changed(this);
    }

    /* Times from the run's record, in server time: ``elapsed_s`` is start to finish, or start to the
       moment the server answered while it runs; the page only adds the time since that answer. */
    timing(record) {
      if (record.created_at) this.startedAt.textContent = `started ${when(record.created_at)}`;
      if (typeof record.elapsed_s !== "number") return;
      this.elapsed = { base: record.elapsed_s, at: performance.now(), final: Boolean(record.finished_at) };
      this.tickClock();
    }

    now() {
      const e = this.elapsed;
      return e.base + (e.final ? 0 : (performance.now() - e.at) / 1000);
    }

    tickClock() {
      if (this.elapsed) this.clock.textContent = seconds(this.now());
      const ticking = this.elapsed && !this.elapsed.final && this.running;
      if (ticking && !this.ticker) this.ticker = setInterval(() => this.tickClock(), 1000);
      if (!ticking && this.ticker) { clearInterval(this.ticker); this.ticker = null; }
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
      this.elapsed = null;
      for (const view of this.rounds.values()) view.stop();
    }

    /* Why the run failed, in one place: a message already shown (or contained in one) is not repeated;
       ``headline`` goes first (how the run stopped, then the messages that say why). */
    problem(message, headline = false) {
      const text = String(message || "").trim();
      if (!text || this.failures.some((shown) => shown.includes(text))) return;
      this.failures = this.failures.filter((shown) => !text.includes(shown));
      if (headline) this.failures.unshift(text); else this.failures.push(text);
      this.failure.textContent = this.failures.join("\n");
      this.failure.hidden = false;
    }

    /* A note; one given before the run started (a demo server's "this run ignores your question") is read
       first, above the answer; later ones go below it. */
    note(message) {
      const seen = this.notes.get(message);
      if (seen) { seen.count += 1; seen.node.textContent = `${message} (${seen.count} times)`; return; }
      const node = el("div", { class: "note", text: message });
      this.notes.set(message, { count: 1, node });
      (this.started ? this.problems : this.lead).append(node);
    }

    round(number) { return this.rounds.get(number); }

    handle(event) {
      const handler = this[`on_${event.event}`];
      if (handler) handler.call(this, event);
    }

    describe({ model, protocol, scripted }) {
      const parts = [model && `model ${model}`, protocol && `protocol ${protocol}`, scripted && "scripted replies"];
      if (this.turn > 1) parts.push(`turn ${this.turn} of the thread`);
      if (this.limit) parts.push(`at most ${this.limit} rounds`);
      this.meta.textContent = parts.filter(Boolean).join(" · ");
      this.described = { model, protocol, scripted };
    }

    on_run_started(event) {
      this.started = true;
      this.setStatus("running");
      if (!this.titled && (event.question || event.task)) this.setTitle(event.question || event.task);
      this.describe(event);
    }
    on_round_started(event) {
      if (this.firstRound === null) {
        this.firstRound = event.round;  // a follow-up's rounds go on from the thread's earlier turns
        if (event.max_rounds) { this.limit = event.max_rounds - event.round + 1; this.describe(this.described || {}); }
      }
      const number = event.round - this.firstRound + 1;
      const view = new RoundView(this.turn > 1 ? `Round ${number} of turn ${this.turn}` : `Round ${number}`, this.files());
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
      this.round(round.index)?.done(round, () => this.answer.scrollIntoView({ block: "start" }));
      this.total += (round.usage && round.usage.total_tokens) || 0;
      if (this.total) this.usage.textContent = tokens({ total_tokens: this.total });
    }
    on_answer(event) { this.showAnswer(event.answer); }
    on_notice(event) { this.note(event.message); }
    on_error(event) { this.problem(event.message); }
    on_finished(event) {
      const run = event.run || {};
      for (const view of this.rounds.values()) view.stop();
      if (run.answer) this.showAnswer(run.answer);
      if (run.usage && run.usage.total_tokens) this.usage.textContent = tokens(run.usage);
      const status = finishedStatus(run);
      this.setStatus(status);
      if (run.answer || status === "cancelled") return;  // the badge says it all
      const stop = run.stop_reason;
      if (stop) this.problem(`${sentence(this.words[stop] || stop)} after ${run.rounds ?? this.rounds.size} round(s).`, true);
      if (run.error) this.problem(run.error);
    }

    showAnswer(text) {
      this.answer.replaceChildren(el("h3", { text: "Answer" }), markdown(withoutAnswerHeading(text)));
      this.answer.hidden = false;
    }

    setTitle(text) {
      this.title.textContent = text;
      this.title.title = text;
    }

    /* Fill in what only the run's record has: its status and times. */
    summary(run) {
      if (run.task && !this.titled) { this.setTitle(run.task); this.titled = true; }
      if (run.thread_id) this.thread = run.thread_id;
      if (run.status) this.setStatus(run.status);
      this.timing(run);
    }

    /* What a round needs to offer the files its code wrote: a download link (with the key, named by the
       server) and, for an image, its bytes as a data: URL (the page's CSP shows images from data only). */
    files() {
      return {
        link: (path, label) => {
          const url = this.fileUrl(path);
          return url && KA.render.downloadLink(url, label, this.actions.download, (error) => this.problem(`Download failed: ${error.message}`));
        },
        image: (path) => {
          const url = this.fileUrl(path);
          return url ? this.actions.fetchImage(url, SHOWN_IMAGE_BYTES) : Promise.resolve(null);
        },
      };
    }

    /* The files route of a path the kernel chose: only plain relative paths (no "." or ".." step, which
       the browser would resolve into another route), each step encoded. */
    fileUrl(path) {
      const steps = path.split("/");
      if (!this.thread || steps.some((step) => !step || step === "." || step === "..")) return null;
      return `/v1/threads/${encodeURIComponent(this.thread)}/files/${steps.map(encodeURIComponent).join("/")}`;
    }
  }

  return RunView;
})();
