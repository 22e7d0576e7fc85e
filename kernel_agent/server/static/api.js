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

  /* The file name a response's Content-Disposition gives (RFC 6266: filename* first), or null. */
  function dispositionName(header) {
    if (!header) return null;
    const extended = header.match(/filename\*\s*=\s*(?:utf-8|UTF-8)''([^;]+)/);
    if (extended) {
      try { return decodeURIComponent(extended[1].trim()); } catch (_) { /* malformed: try the plain one */ }
    }
    const plain = header.match(/filename\s*=\s*"([^"]*)"|filename\s*=\s*([^;\s]+)/);
    return plain ? (plain[1] ?? plain[2]) : null;
  }

  /* Download a protected file with the key, then hand it to the browser as a file named as the server
     names it (its Content-Disposition), else after the URL's last part. */
  async function download(url) {
    const response = await fetch(url, { headers: headers() });
    if (!response.ok) throw await failure(response);
    const name = dispositionName(response.headers.get("Content-Disposition")) || decodeURIComponent(url.split("/").pop());
    const blob = await response.blob();
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = name;
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  }

  /* The magic numbers of the raster formats the page shows; the served type is not trusted for this. */
  const IMAGE_MAGIC = [
    ["image/png", [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]],
    ["image/jpeg", [0xff, 0xd8, 0xff]],
    ["image/gif", [0x47, 0x49, 0x46, 0x38]],
    ["image/webp", [0x52, 0x49, 0x46, 0x46, null, null, null, null, 0x57, 0x45, 0x42, 0x50]],
  ];

  /* A file as a data: URL of the raster image its bytes are (PNG, JPEG, GIF, WebP: never SVG or HTML),
     or null when it is none of those or larger than ``limit`` bytes. */
  async function fetchImage(url, limit) {
    const response = await fetch(url, { headers: headers() });
    if (!response.ok) throw await failure(response);
    const size = Number(response.headers.get("Content-Length"));
    if (!(size > 0 && size <= limit)) { response.body?.cancel(); return null; }
    const bytes = new Uint8Array(await response.arrayBuffer());
    const found = IMAGE_MAGIC.find(([, magic]) => magic.every((byte, i) => byte === null || bytes[i] === byte));
    if (!found) return null;
    let binary = "";
    for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    return `data:${found[0]};base64,${btoa(binary)}`;
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
    AuthError, ApiError, key, download, fetchImage, follow, fetchFile,
    upload: (file) => { const form = new FormData(); form.append("file", file, file.name); return request("POST", "/v1/files", form); },
    info: () => request("GET", "/v1/info"),
    startRun: (body) => request("POST", "/v1/runs", body),
    run: (id) => request("GET", `/v1/runs/${encodeURIComponent(id)}`),
    cancel: (id) => request("POST", `/v1/runs/${encodeURIComponent(id)}/cancel`),
    threads: () => request("GET", "/v1/threads"),
    thread: (id) => request("GET", `/v1/threads/${encodeURIComponent(id)}`),
  };
})();
