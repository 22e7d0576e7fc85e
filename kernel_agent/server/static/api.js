/* The service's native API, from the browser: JSON calls, uploads and the run's event stream.
   Owns the bearer key (kept in sessionStorage: this tab only) and the SSE reading. Draws nothing. */
"use strict";

window.KA = window.KA || {};

KA.api = (() => {
  const KEY = "kernel-agent-key";

  class AuthError extends Error {}
  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  const key = {
    get: () => sessionStorage.getItem(KEY),
    set: (value) => sessionStorage.setItem(KEY, value),
    clear: () => sessionStorage.removeItem(KEY),
  };

  function headers(extra) {
    const out = Object.assign({}, extra || {});
    const value = key.get();
    if (value) out.Authorization = `Bearer ${value}`;
    return out;
  }

  async function failure(response) {
    if (response.status === 401 || response.status === 403) return new AuthError("the service needs a valid key");
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      const detail = body.detail !== undefined ? body.detail : body.error;
      if (detail) message = typeof detail === "string" ? detail : (detail.message || JSON.stringify(detail));
    } catch (_) { /* not JSON: keep the status line */ }
    return new ApiError(response.status, message);
  }

  async function request(method, path, body) {
    const init = { method, headers: headers() };
    if (body instanceof FormData) init.body = body;
    else if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers["Content-Type"] = "application/json";
    }
    const response = await fetch(path, init);
    if (!response.ok) throw await failure(response);
    return response.status === 204 ? null : response.json();
  }

  /* Download a protected file with the key, then hand it to the browser as a file. */
  async function download(url, filename) {
    const response = await fetch(url, { headers: headers() });
    if (!response.ok) throw await failure(response);
    const blob = await response.blob();
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = filename;
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  }

  /* Follow /v1/runs/{id}/events until the run's "finished" event (or the stream ends for good).
     EventSource cannot send a bearer key, so this reads the SSE over fetch and resumes with
     Last-Event-ID after a dropped connection. */
  async function follow(runId, onEvent, signal) {
    let lastId = null;
    for (let attempt = 0; attempt < 20 && !signal.aborted; attempt++) {
      const extra = { Accept: "text/event-stream" };
      if (lastId !== null) extra["Last-Event-ID"] = lastId;
      let response;
      try {
        response = await fetch(`/v1/runs/${encodeURIComponent(runId)}/events`, { headers: headers(extra), signal });
      } catch (error) {
        if (signal.aborted) return;
        await pause(Math.min(500 * 2 ** attempt, 5000));
        continue;
      }
      if (!response.ok) throw await failure(response);
      let finished = false;
      await readSse(response.body, (id, data) => {
        if (id !== null) lastId = id;
        const event = JSON.parse(data);
        if (event.event === "finished") finished = true;
        onEvent(event);
      }).catch((error) => { if (!signal.aborted) console.warn("event stream interrupted:", error.message); });
      if (finished || signal.aborted) return;
      await pause(Math.min(500 * 2 ** attempt, 5000));
    }
  }

  async function readSse(body, onMessage) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let id = null;
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("id:")) id = line.slice(3).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length) onMessage(id, data.join("\n"));
      }
    }
  }

  const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  /* A file the server offers (the demo's bundled data) as a File, to upload like a dropped one. */
  async function fetchFile(url, name) {
    const response = await fetch(url, { headers: headers() });
    if (!response.ok) throw await failure(response);
    const blob = await response.blob();
    return new File([blob], name, { type: blob.type });
  }

  return {
    AuthError, ApiError, key, download, follow, fetchFile,
    upload: (file) => { const form = new FormData(); form.append("file", file, file.name); return request("POST", "/v1/files", form); },
    info: () => request("GET", "/v1/info"),
    startRun: (body) => request("POST", "/v1/runs", body),
    run: (id) => request("GET", `/v1/runs/${encodeURIComponent(id)}`),
    cancel: (id) => request("POST", `/v1/runs/${encodeURIComponent(id)}/cancel`),
    threads: () => request("GET", "/v1/threads"),
    thread: (id) => request("GET", `/v1/threads/${encodeURIComponent(id)}`),
  };
})();
