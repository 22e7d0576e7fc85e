/* The page: the new-analysis form (uploads, task, model/protocol), the thread being watched
   (its downloads, once; its runs, live and followed to the newest round unless the reader scrolls away;
   and a follow-up question in the same kernel, with files of its own), the list of
   past analyses with search, kept live while any of them runs, the service key when the server asks
   for one, and on a demo server what it offers and that its replies are scripted. Routes by location.hash. */
"use strict";

(() => {
  const { api, RunView, Uploads, Follower } = KA;
  const { el, when } = KA.render;
  const $ = (id) => document.getElementById(id);
  const LIST_POLL_MS = 2000;  // the history is asked again this often while one of its analyses runs
  const state = { info: {}, threads: [], thread: null, views: [], follow: null, listTimer: null, changedTimer: null,
    demoOffered: false };
  const THREAD_DOWNLOADS = [  // [record field, label]: each named by the server after the thread
    ["notebook_url", "Notebook (.ipynb)"],
    ["clean_url", "Clean notebook"],
    ["html_url", "HTML report"],
    ["zip_url", "Notebook with its data (.zip)"],
  ];
  const actions = {
    cancel: (id) => api.cancel(id),
    download: (url) => api.download(url),
    fetchImage: (url, limit) => api.fetchImage(url, limit),
    changed: () => {  // a watched run started or ended: the history says so at once (one ask for a burst)
      clearTimeout(state.changedTimer);
      state.changedTimer = setTimeout(loadThreads, 50);
    },
  };
  let uploads, followUploads, follower;

  function banner(text) {
    $("banner").textContent = text || "";
    $("banner").hidden = !text;
  }

  /* Every call goes through here: a refused key brings up the key form. */
  async function call(work) {
    try {
      return await work();
    } catch (error) {
      if (error instanceof api.AuthError) {
        $("key-refused").hidden = !api.key.get();  // a key was sent and refused (not merely missing)
        api.key.clear();
        show("key");
        banner("");
      } else {
        banner(error.message);
      }
      throw error;
    }
  }

  function show(view) {
    $("key-form").hidden = view !== "key";
    $("new-run").hidden = view !== "new";
    $("thread-view").hidden = view !== "thread";
    $("forget-key").hidden = !api.key.get();
    if (view === "key") $("key-input").focus();
  }

  // -- uploads --------------------------------------------------------------------------------
  function updateStart() {
    const pending = uploads.pending;
    $("start").disabled = pending;
    $("start").textContent = pending ? "Uploading…" : "Start analysis";
    $("ask").disabled = followUploads.pending;
  }

  const upload = (file) => api.upload(file);  // refusals show next to the file, not in the banner

  /* A demo server's bundled data and task, put on the form as if the user had brought them. */
  async function offerDemo() {
    const demo = state.info.demo;
    if (!demo || state.demoOffered) return;
    state.demoOffered = true;
    if (!$("task").value.trim()) $("task").value = demo.task;
    const files = await Promise.all(demo.files.map((file) => call(() => api.fetchFile(file.url, file.name)))).catch(() => null);
    if (files) uploads.add(files);
  }

  // -- runs and threads -----------------------------------------------------------------------
  async function startRun(event) {
    event.preventDefault();
    const body = { task: $("task").value.trim(), file_ids: uploads.ids };
    if (!body.task || uploads.pending) return;
    const sources = [...$("source-list").querySelectorAll("input:checked")].map((box) => box.value);
    if (sources.length) body.sources = sources;
    if ($("model").value.trim()) body.model = $("model").value.trim();
    if ($("protocol").value) body.protocol = $("protocol").value;
    $("start").disabled = true;
    try {
      const run = await call(() => api.startRun(body));
      $("task").value = "";
      uploads.clear();
      for (const box of $("source-list").querySelectorAll("input")) box.checked = false;
      location.hash = `#thread/${encodeURIComponent(run.thread_id || run.id)}`;
      loadThreads();  // the history lists it from the moment it starts
    } catch (_) { /* shown in the banner */ } finally { updateStart(); }
  }

  async function followUp(event) {
    event.preventDefault();
    const task = $("follow-up-task").value.trim();
    if (!task || !state.thread || followUploads.pending) return;
    const run = await call(() => api.startRun({ task, thread_id: state.thread, file_ids: followUploads.ids })).catch(() => null);
    if (!run) return;
    $("follow-up-task").value = "";
    followUploads.clear();
    watch(run);
    loadThreads();
  }

  async function openThread(threadId) {
    stopWatching();
    state.thread = threadId;
    show("thread");
    markCurrent();
    $("runs").replaceChildren();
    $("thread-downloads").hidden = true;
    const thread = await call(() => api.thread(threadId)).catch(() => null);
    if (!thread || state.thread !== threadId) return;
    threadDownloads(thread);
    for (const run of thread.runs || []) watch(typeof run === "string" ? { id: run } : run);
    $("main").focus({ preventScroll: true });
    follower.resume();
  }

  /* The thread's downloads, once for the whole thread (every turn is in its notebook): shown from the
     moment one of its runs has ended, when there is a notebook to download. */
  function threadDownloads(thread) {
    const links = THREAD_DOWNLOADS.filter(([field]) => typeof thread[field] === "string").map(([field, label]) =>
      KA.render.downloadLink(thread[field], label, actions.download, (error) => banner(`Download failed: ${error.message}`)));
    $("thread-download-links").replaceChildren(...links);
  }

  function showThreadDownloads() {
    $("thread-downloads").hidden = $("thread-download-links").childElementCount === 0;
  }

  /* Show a run and follow its events (a finished run replays them, then ends). */
  function watch(record) {
    const view = new RunView(record, actions,
      { turn: state.views.length + 1, words: state.info.stop_words || {}, thread: state.thread });
    state.views.push(view);
    $("runs").append(view.node);
    $("follow-up").hidden = true;
    $("follow-up-refused").hidden = true;
    const controller = state.follow || (state.follow = new AbortController());
    follower.resume();
    let sawLive = false;  // the reader watched it run (not a finished run's events replayed on opening)
    api.follow(view.id, (event) => { view.handle(event); sawLive = sawLive || view.live; }, controller.signal)
      .then(() => call(() => api.run(view.id)))
      .then((run) => {
        if (!run) return;
        view.summary(run);
        showThreadDownloads();
        // A run the reader followed to its end lands on its answer (at the top of its card), not its last round.
        if (sawLive && follower.following && !view.answer.hidden) view.answer.scrollIntoView({ block: "start" });
      })
      .catch((error) => { if (!(error instanceof api.AuthError)) view.problem(error.message); })
      .finally(() => { if (state.views.at(-1) === view && !controller.signal.aborted) readyForFollowUp(); });
  }

  /* The follow-up form; a demo server's script answers one question, so it says so instead. */
  function readyForFollowUp() {
    const demo = state.info.demo;
    $("follow-up").hidden = Boolean(demo);
    $("follow-up-refused").textContent = demo ? demo.follow_up : "";
    $("follow-up-refused").hidden = !demo;
    loadThreads();
  }

  function stopWatching() {
    if (state.follow) state.follow.abort();
    state.follow = null;
    for (const view of state.views) view.dispose();
    state.views = [];
  }

  // -- the list of past analyses ----------------------------------------------------------------
  async function loadThreads() {
    const listed = await call(() => api.threads()).catch(() => null);
    if (!listed) return;
    state.threads = Array.isArray(listed) ? listed : listed.threads || listed.data || [];
    drawThreads();
    keepListLive();
  }

  /* While any listed analysis runs (here or in another tab), ask again shortly: its state changes live. */
  function keepListLive() {
    clearTimeout(state.listTimer);
    state.listTimer = null;
    if (state.threads.some((thread) => ["queued", "running"].includes(thread.status))) {
      state.listTimer = setTimeout(loadThreads, LIST_POLL_MS);
    }
  }

  const threadTask = (thread) => thread.task || thread.title || (thread.runs && thread.runs[0] && thread.runs[0].task) || thread.id;

  function drawThreads() {
    const query = $("search").value.trim().toLowerCase();
    const shown = state.threads.filter((thread) => !query || JSON.stringify([threadTask(thread), thread.tasks || []]).toLowerCase().includes(query));
    $("threads").replaceChildren(...shown.map((thread) => el("li", { "data-status": thread.status },
      el("button", { type: "button", "data-thread-id": thread.id, onclick: () => { location.hash = `#thread/${encodeURIComponent(thread.id)}`; } },
        el("span", { class: "task", text: threadTask(thread) }),
        el("span", { class: "meta" }, el("span", { class: thread.status, text: thread.status }),
          ` · ${when(thread.updated_at || thread.created_at)}`)))));
    $("threads-empty").hidden = state.threads.length > 0;
    markCurrent();
  }

  function markCurrent() {
    for (const button of $("threads").querySelectorAll("button")) {
      button.setAttribute("aria-current", String(button.dataset.threadId === state.thread));
    }
  }

  // -- routing and start-up ---------------------------------------------------------------------
  function route() {
    banner("");
    const match = location.hash.match(/^#thread\/(.+)$/);
    if (match) return openThread(decodeURIComponent(match[1]));
    stopWatching();
    state.thread = null;
    show("new");
    markCurrent();
    $("task").focus();
    offerDemo();
  }

  /* What the server offers, asked without a key: a server that wants one gets the key form
     before any call is refused (the browser logs every refused call as a console error). */
  async function describeServer() {
    const info = await api.info().catch(() => null);
    if (!info) return true;  // an older server: find out from the first call
    state.info = info;
    uploads.configure(info);
    followUploads.configure(info);
    if (info.model_choice === false) $("model").closest(".option-row").hidden = true;
    $("model-list").replaceChildren(...(info.models || []).map((name) => el("option", { value: name })));
    if (info.default_model) $("model").placeholder = `server default (${info.default_model})`;
    offerSources(info.sources || []);
    if (info.demo) {
      $("demo-note").textContent = `Demo server: ${info.demo.note}`;
      $("demo-note").hidden = false;
      $("protocol").closest(".option-row").hidden = true;
    }
    if (info.auth && !api.key.get()) { show("key"); return false; }
    return true;
  }

  /* The live databases the server's operator offers (name and kind), as boxes a new thread ticks. */
  function offerSources(sources) {
    $("source-list").replaceChildren(...sources.map((source) => {
      const box = el("input", { type: "checkbox", value: source.name, id: `source-${source.name}` });
      const label = el("label", { for: box.id }, `${source.name} (${source.kind})`);
      return el("div", { class: "source" }, box, label);
    }));
    $("source-choice").hidden = !sources.length;
  }

    async function start() {
    if (!(await describeServer())) return;
    const threads = await call(() => api.threads()).catch(() => null);
    if (!threads) return;  // the key form is up (or the banner says why)
    state.threads = Array.isArray(threads) ? threads : threads.threads || threads.data || [];
    drawThreads();
    keepListLive();
    route();
  }

  function submitOnCtrlEnter(textarea, form) {
    textarea.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); form.requestSubmit(); }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    follower = new Follower($("thread-view"), () => state.views.some((view) => view.live));
    uploads = new Uploads({ zone: $("drop-zone"), input: $("file-input"), list: $("file-list"), upload, onChange: () => updateStart() });
    followUploads = new Uploads({ zone: $("follow-up-drop"), input: $("follow-up-files"), list: $("follow-up-list"), upload,
      onChange: () => updateStart() });
    $("new-run").addEventListener("submit", startRun);
    $("follow-up").addEventListener("submit", followUp);
    submitOnCtrlEnter($("task"), $("new-run"));
    submitOnCtrlEnter($("follow-up-task"), $("follow-up"));
    $("search").addEventListener("input", drawThreads);
    $("new-analysis").addEventListener("click", () => { location.hash = ""; route(); });
    $("home-link").addEventListener("click", (event) => { event.preventDefault(); location.hash = ""; route(); });
    $("forget-key").addEventListener("click", () => { api.key.clear(); show("key"); });
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      $("key-refused").hidden = true;
      api.key.set($("key-input").value.trim());
      $("key-input").value = "";
      start();
    });
    window.addEventListener("hashchange", route);
    start();
  });
})();
