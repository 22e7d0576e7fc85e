/* The page: the new-analysis form (uploads, task, model/protocol), the thread being watched
   (its runs, live, and a follow-up question in the same kernel), the list of past analyses with
   search, and the service key when the server asks for one. Routes by location.hash. */
"use strict";

(() => {
  const { api, RunView } = KA;
  const { el } = KA.render;
  const $ = (id) => document.getElementById(id);
  const state = { uploads: [], threads: [], thread: null, views: [], follow: null };
  const actions = { cancel: (id) => api.cancel(id), download: (url, name) => api.download(url, name) };

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
  function addFiles(files) {
    for (const file of files) {
      const entry = { file, id: null, done: false };
      state.uploads.push(entry);
      entry.node = el("li", { class: "uploading" }, el("span", { text: `${file.name} · uploading…` }));
      $("file-list").append(entry.node);
      call(() => api.upload(file)).then((uploaded) => {
        entry.id = uploaded.id;
        entry.done = true;
        entry.node.className = "";
        entry.node.replaceChildren(el("span", { text: `${uploaded.filename || file.name} · ${size(uploaded.bytes ?? file.size)}` }),
          el("button", { type: "button", "aria-label": `Remove ${file.name}`, text: "×", onclick: () => removeUpload(entry) }));
      }).catch(() => removeUpload(entry)).finally(updateStart);
    }
    updateStart();
  }

  function removeUpload(entry) {
    state.uploads = state.uploads.filter((item) => item !== entry);
    entry.node.remove();
    updateStart();
  }

  function updateStart() {
    const pending = state.uploads.some((entry) => !entry.done);
    $("start").disabled = pending;
    $("start").textContent = pending ? "Uploading…" : "Start analysis";
  }

  const size = (bytes) => (bytes < 1024 ? `${bytes} B` : bytes < 1048576 ? `${(bytes / 1024).toFixed(1)} KB` : `${(bytes / 1048576).toFixed(1)} MB`);

  function bindDropZone() {
    const zone = $("drop-zone"), input = $("file-input");
    zone.addEventListener("click", () => input.click());
    zone.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); input.click(); }
    });
    input.addEventListener("change", () => { addFiles(Array.from(input.files)); input.value = ""; });
    for (const name of ["dragenter", "dragover"]) {
      zone.addEventListener(name, (event) => { event.preventDefault(); zone.classList.add("dragging"); });
    }
    for (const name of ["dragleave", "drop"]) zone.addEventListener(name, () => zone.classList.remove("dragging"));
    zone.addEventListener("drop", (event) => { event.preventDefault(); addFiles(Array.from(event.dataTransfer.files)); });
  }

  // -- runs and threads -----------------------------------------------------------------------
  async function startRun(event) {
    event.preventDefault();
    const body = { task: $("task").value.trim(), file_ids: state.uploads.map((entry) => entry.id) };
    if (!body.task) return;
    if ($("model").value.trim()) body.model = $("model").value.trim();
    if ($("protocol").value) body.protocol = $("protocol").value;
    $("start").disabled = true;
    try {
      const run = await call(() => api.startRun(body));
      $("task").value = "";
      state.uploads.forEach((entry) => entry.node.remove());
      state.uploads = [];
      location.hash = `#thread/${encodeURIComponent(run.thread_id || run.id)}`;
    } catch (_) { /* shown in the banner */ } finally { updateStart(); }
  }

  async function followUp(event) {
    event.preventDefault();
    const task = $("follow-up-task").value.trim();
    if (!task || !state.thread) return;
    const run = await call(() => api.startRun({ task, thread_id: state.thread, file_ids: [] })).catch(() => null);
    if (!run) return;
    $("follow-up-task").value = "";
    watch({ id: run.id, task, status: run.status });
    loadThreads();
  }

  async function openThread(threadId) {
    stopWatching();
    state.thread = threadId;
    show("thread");
    markCurrent();
    $("runs").replaceChildren();
    const thread = await call(() => api.thread(threadId)).catch(() => null);
    if (!thread) return;
    const runs = thread.runs || [];
    for (const run of runs) watch(typeof run === "string" ? { id: run } : run);
    $("main").focus();
  }

  /* Show a run and follow its events (a finished run replays them, then ends). */
  function watch(summary) {
    const view = new RunView(summary, actions);
    state.views.push(view);
    $("runs").append(view.node);
    $("follow-up").hidden = true;
    const controller = state.follow || (state.follow = new AbortController());
    api.follow(view.id, (event) => view.handle(event), controller.signal)
      .then(() => call(() => api.run(view.id)))
      .then((run) => { if (run) view.summary(run); })
      .catch((error) => { if (!(error instanceof api.AuthError)) view.problem(error.message); })
      .finally(() => { if (state.views.at(-1) === view && !controller.signal.aborted) readyForFollowUp(); });
  }

  function readyForFollowUp() {
    $("follow-up").hidden = false;
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
  }

  const threadTask = (thread) => thread.task || thread.title || (thread.runs && thread.runs[0] && thread.runs[0].task) || thread.id;

  function drawThreads() {
    const query = $("search").value.trim().toLowerCase();
    const shown = state.threads.filter((thread) => !query || JSON.stringify([threadTask(thread), thread.tasks || []]).toLowerCase().includes(query));
    $("threads").replaceChildren(...shown.map((thread) => el("li", {},
      el("button", { type: "button", "data-thread-id": thread.id, onclick: () => { location.hash = `#thread/${encodeURIComponent(thread.id)}`; } },
        el("span", { class: "task", text: threadTask(thread) }),
        el("span", { class: "meta", text: [thread.status, when(thread.updated_at || thread.created_at)].filter(Boolean).join(" · ") })))));
    $("threads-empty").hidden = state.threads.length > 0;
    markCurrent();
  }

  /* A server time (ISO 8601 or unix seconds) in the reader's own words and time zone. */
  function when(value) {
    if (!value) return "";
    const date = new Date(typeof value === "number" ? value * 1000 : value);
    return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
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
  }

  /* What the server offers, asked without a key: a server that wants one gets the key form
     before any call is refused (the browser logs every refused call as a console error). */
  async function describeServer() {
    const info = await api.info().catch(() => null);
    if (!info) return true;  // an older server: find out from the first call
    if (info.model_choice === false) $("model").closest(".option-row").hidden = true;
    $("model-list").replaceChildren(...(info.models || []).map((name) => el("option", { value: name })));
    if (info.default_model) $("model").placeholder = `server default (${info.default_model})`;
    if (info.auth && !api.key.get()) { show("key"); return false; }
    return true;
  }

  async function start() {
    if (!(await describeServer())) return;
    const threads = await call(() => api.threads()).catch(() => null);
    if (!threads) return;  // the key form is up (or the banner says why)
    state.threads = Array.isArray(threads) ? threads : threads.threads || threads.data || [];
    drawThreads();
    route();
  }

  function submitOnCtrlEnter(textarea, form) {
    textarea.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); form.requestSubmit(); }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    bindDropZone();
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
