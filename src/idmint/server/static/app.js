// The idmint server's web page: decode IDs (fields and a picture of their bits),
// mint a few, and show what the server holds. Plain browser JavaScript, no build.
"use strict";

(() => {
  const TOKEN_KEY = "idmint.token";

  // -- bit layouts, most significant field first -----------------------------------------
  // `field` names the colour (and the data-field of the cells); generator bits of
  // uid64 are split around the mode bit, so two segments share the colour.
  const seg = (key, width, label, colour) => ({ key, width, label, colour: colour || key });

  const LAYOUTS = {
    uid64: () => [
      seg("timestamp", 42, "timestamp"),
      seg("sequence", 6, "sequence"),
      seg("generator-high", 3, "generator bits 10–8", "generator"),
      seg("mode", 1, "mode"),
      seg("generator-low", 8, "generator bits 7–0", "generator"),
      seg("cluster", 4, "cluster"),
    ],
    "uid64-v1": () => [
      seg("timestamp", 42, "timestamp"),
      seg("sequence", 6, "sequence"),
      seg("reserved", 6, "reserved"),
      seg("generator", 6, "generator"),
      seg("cluster", 4, "cluster"),
    ],
    elastic64: (nodeBits) =>
      [
        seg("timestamp", 48, "timestamp"),
        seg("burst", 16 - nodeBits, "burst"),
        seg("node", nodeBits, "node"),
      ].filter((s) => s.width > 0),
    muid: () => [
      seg("timestamp", 56, "timestamp"),
      seg("medallion", 52, "medallion"),
      seg("offset", 20, "offset"),
    ],
    short60: () => [
      seg("timestamp", 42, "timestamp"),
      seg("sequence", 9, "sequence"),
      seg("node", 9, "node"),
    ],
    // RFC 9562 fixes the time, version and variant; the rest is idmint's layout.
    uuid7: () => [
      seg("timestamp", 48, "unix_ts_ms"),
      seg("version", 4, "version", "reserved"),
      seg("counter-high", 12, "counter bits 17–6", "sequence"),
      seg("variant", 2, "variant", "reserved"),
      seg("counter-low", 6, "counter bits 5–0", "sequence"),
      seg("node", 16, "node"),
      seg("random", 40, "random"),
    ],
    // The layout this server reads snowflakes in, from its API description.
    snowflake: () => {
      const shape = snowflakeLayout;
      const low = [seg("worker", shape.worker_bits, "worker"), seg("sequence", shape.sequence_bits, "sequence")];
      if (shape.order === "time-sequence-worker") low.reverse();
      return [seg("sign", 1, "sign"), seg("timestamp", shape.time_bits, "timestamp"), ...low].filter(
        (s) => s.width > 0,
      );
    },
  };

  // Twitter's, until the server's API description says which layout it reads.
  let snowflakeLayout = {
    epoch_ms: 1288834974657,
    tick_ms: 1,
    time_bits: 41,
    worker_bits: 10,
    sequence_bits: 12,
    order: "time-worker-sequence",
  };

  const SUMMARIES = {
    uid64:
      "java-uniqueid’s eight-byte ID: a 42-bit millisecond timestamp (bit-reversed in spread " +
      "mode), a 6-bit sequence, an 11-bit generator split around the mode bit and a 4-bit cluster.",
    "uid64-v1":
      "java-uniqueid’s original layout: a 42-bit bit-reversed timestamp, a 6-bit sequence, " +
      "6 reserved zero bits, a 6-bit generator and a 4-bit cluster.",
    elastic64:
      "A 48-bit millisecond timestamp, then 16 bits shared by a burst counter and a node ID " +
      "whose width (node_bits) is not stored in the ID.",
    muid:
      "128 bits: a 56-bit microsecond timestamp, a 52-bit medallion naming the node and a " +
      "20-bit offset within a transaction.",
    short60:
      "60 bits: 42 bits of milliseconds since 2018-03-01, a 9-bit sequence and a 9-bit node " +
      "(random bits in uexky's IDs), " +
      "shown as rotated base 64.",
    uuid7:
      "An RFC 9562 version-7 UUID: a 48-bit millisecond timestamp, version 7 and variant 10; " +
      "in idmint’s layout an 18-bit counter, a 16-bit claimed node and 40 random bits " +
      "(in a UUIDv7 minted elsewhere those bits are that generator’s own).",
    snowflake:
      "63 bits below a zero sign bit, shown in decimal: time, worker and sequence in a " +
      "layout (Twitter's: 41 bits of ms since 2010-11-04, a 10-bit worker, a 12-bit sequence).",
  };

  const ABOUT = {
    scheme: "the ID’s scheme",
    id: "canonical text form",
    time: "when it was minted (UTC)",
    timestamp_ms: "milliseconds since 1970-01-01 UTC",
    timestamp_us: "microseconds since 1970-01-01 UTC",
    sequence: "position within its millisecond",
    generator: "the generator that minted it",
    cluster: "the generator’s cluster",
    burst: "position within its millisecond on that node",
    node: "the node that minted it",
    node_bits: "node-ID width used to decode",
    medallion: "the node that minted it",
    offset: "position within its transaction (0 = the transaction)",
    int: "the 60 bits as an integer",
    counter: "position within its millisecond (idmint’s layout)",
    random: "random bits",
    worker: "the worker that minted it",
  };

  const BITS = {
    uid64: 64,
    "uid64-v1": 64,
    elastic64: 64,
    muid: 128,
    short60: 60,
    uuid7: 128,
    snowflake: 64,
  };
  const SHORT60_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const SHORT60_EPOCH_MS = 1519862400000n;

  // -- helpers ---------------------------------------------------------------------------
  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else if (name === "style") node.style.cssText = value; // CSSOM: fine under a strict CSP
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  /** JSON.parse that keeps integers beyond 2**53 exact (as strings): a short60's `int`
   * and a muid's timestamp can be larger than a JavaScript number holds. */
  function parseJsonExact(text) {
    const quoted = text.replace(/("(?:[^"\\]|\\.)*")|(?<![\w.+-])(-?\d{16,})(?![\d.eE])/g, (match, str, num) =>
      str !== undefined ? str : `"${num}"`,
    );
    return JSON.parse(quoted);
  }

  class ApiError extends Error {
    constructor(status, error, detail) {
      super(detail);
      this.status = status;
      this.error = error;
      this.detail = detail;
    }
  }

  function token() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || "";
    } catch {
      return "";
    }
  }

  async function api(path, signal) {
    const headers = { Accept: "application/json" };
    const bearer = token();
    if (bearer) headers.Authorization = `Bearer ${bearer}`;
    let response;
    try {
      response = await fetch(path, { headers, cache: "no-store", signal });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new ApiError(0, "server unreachable", `could not reach the server (${error.message})`);
    }
    const text = await response.text();
    let body = null;
    try {
      body = parseJsonExact(text);
    } catch {
      body = null;
    }
    if (!response.ok) {
      if (response.status === 401) openTokenPanel();
      const error = body && typeof body === "object" && body.error ? body.error : response.statusText;
      const detail = body && typeof body === "object" && body.detail ? body.detail : text.trim();
      throw new ApiError(response.status, error || "error", detail || "");
    }
    if (body === null) throw new ApiError(response.status, "bad response", "the server did not send JSON");
    return body;
  }

  function showError(box, error) {
    box.replaceChildren();
    if (!error) {
      box.hidden = true;
      return;
    }
    const title = error instanceof ApiError ? error.error : "error";
    const status = error instanceof ApiError && error.status ? ` (HTTP ${error.status})` : "";
    box.append(el("strong", { class: "error-title" }, title), el("span", { class: "muted" }, status));
    box.append(el("p", { class: "error-detail" }, error.detail || error.message));
    box.dataset.status = error instanceof ApiError ? String(error.status) : "";
    if (error instanceof ApiError && error.status === 401) {
      box.append(el("p", { class: "hint" }, "Enter the server’s token under “Access token” at the top."));
    }
    box.hidden = false;
  }

  // -- ID text -> bits ------------------------------------------------------------------
  function idToBigInt(scheme, text) {
    const t = text.trim();
    if (scheme === "uid64" || scheme === "uid64-v1") {
      if (!/^[0-9a-fA-F]{16}$/.test(t)) throw new Error(`not 16 hex digits: ${t}`);
      return BigInt(`0x${t}`);
    }
    if (scheme === "muid") {
      const hex = t.replace(/-/g, "");
      if (!/^[0-9a-fA-F]{32}$/.test(hex)) throw new Error(`not 32 hex digits: ${t}`);
      return BigInt(`0x${hex}`);
    }
    if (scheme === "uuid7") {
      const hex = t.replace(/^urn:uuid:/i, "").replace(/^\{(.*)\}$/, "$1").replace(/-/g, "");
      if (!/^[0-9a-fA-F]{32}$/.test(hex)) throw new Error(`not a UUID: ${t}`);
      return BigInt(`0x${hex}`);
    }
    if (scheme === "elastic64" || scheme === "snowflake") {
      if (!/^\d{1,20}$/.test(t)) throw new Error(`not decimal digits: ${t}`);
      return BigInt(t);
    }
    if (scheme === "short60") {
      // The display form is the base-64 digits with the last two moved to the front.
      const digits = t.length > 2 ? t.slice(2) + t.slice(0, 2) : t;
      let value = 0n;
      for (const char of digits) {
        const digit = SHORT60_ALPHABET.indexOf(char);
        if (digit < 0) throw new Error(`not a base-64 digit: ${char}`);
        value = value * 64n + BigInt(digit);
      }
      return value;
    }
    throw new Error(`unknown scheme ${scheme}`);
  }

  function reverse42(value) {
    let out = 0n;
    for (let i = 0; i < 42; i += 1) out = (out << 1n) | ((value >> BigInt(i)) & 1n);
    return out;
  }

  /** Cut `value` into the segments of `layout`: [{...segment, high, low, value}]. */
  function cut(value, layout, totalBits) {
    let high = totalBits - 1;
    return layout.map((s) => {
      const low = high - s.width + 1;
      const part = (value >> BigInt(low)) & ((1n << BigInt(s.width)) - 1n);
      const piece = { ...s, high, low, value: part };
      high = low - 1;
      return piece;
    });
  }

  /**
   * Only the newest of overlapping requests may show its answer: a slow answer to an
   * older one (a decode before the scheme changed, say) must not overwrite a newer one.
   * `start()` aborts the previous request and returns a ticket; `ticket.current()`
   * tells whether its answer is still wanted.
   */
  function latestOnly() {
    let newest = 0;
    let controller = null;
    return {
      start() {
        if (controller) controller.abort();
        controller = new AbortController();
        const number = (newest += 1);
        return { signal: controller.signal, current: () => number === newest };
      },
    };
  }

  /** The fields the server reports, recomputed here from the bits (to cross-check). */
  function derive(scheme, parts, value, nodeBits) {
    const p = Object.fromEntries(parts.map((s) => [s.key, s.value]));
    switch (scheme) {
      case "uid64":
      case "uid64-v1": {
        const mode = scheme === "uid64" ? p.mode : 0n;
        const generator = scheme === "uid64" ? (p["generator-high"] << 8n) | p["generator-low"] : p.generator;
        return {
          timestamp_ms: mode ? p.timestamp : reverse42(p.timestamp),
          sequence: p.sequence,
          generator,
          cluster: p.cluster,
          mode: mode ? "time-sequential" : "spread",
        };
      }
      case "elastic64":
        return { timestamp_ms: p.timestamp, burst: p.burst ?? 0n, node: p.node, node_bits: BigInt(nodeBits) };
      case "muid":
        return { timestamp_us: p.timestamp, medallion: p.medallion, offset: p.offset };
      case "short60":
        return {
          timestamp_ms: p.timestamp + SHORT60_EPOCH_MS,
          sequence: p.sequence,
          node: p.node,
          int: value,
        };
      case "uuid7":
        return {
          timestamp_ms: p.timestamp,
          counter: (p["counter-high"] << 6n) | p["counter-low"],
          node: p.node,
          random: p.random,
        };
      case "snowflake":
        return {
          timestamp_ms: BigInt(snowflakeLayout.epoch_ms) + p.timestamp * BigInt(snowflakeLayout.tick_ms),
          worker: p.worker,
          sequence: p.sequence,
        };
      default:
        return {};
    }
  }

  function meaning(scheme, piece, data) {
    switch (piece.key) {
      case "timestamp":
        if (scheme === "uid64" || scheme === "uid64-v1") {
          return data.mode === "time-sequential"
            ? `${data.timestamp_ms} ms, stored as is`
            : `bit-reversed: ${data.timestamp_ms} ms`;
        }
        if (scheme === "short60") return `ms since 2018-03-01 → ${data.timestamp_ms} ms`;
        if (scheme === "muid") return `µs since 1970 → ${data.time}`;
        if (scheme === "snowflake") {
          const { tick_ms: tick, epoch_ms: epoch } = snowflakeLayout;
          const since = new Date(epoch).toISOString().slice(0, 10);
          return `${tick === 1 ? "ms" : `${tick} ms ticks`} since ${since} → ${data.timestamp_ms} ms`;
        }
        return `ms since 1970 → ${data.time}`;
      case "generator-high":
        return `generator ${data.generator} = ${piece.value} × 256 + low bits`;
      case "generator-low":
        return `low 8 bits of generator ${data.generator}`;
      case "mode":
        return piece.value ? "1 = time-sequential" : "0 = spread";
      case "reserved":
        return "always zero";
      case "version":
        return `${piece.value} = version 7`;
      case "variant":
        return `${piece.value.toString(2)} = RFC 9562’s variant`;
      case "counter-high":
        return `counter ${data.counter} = ${piece.value} × 64 + low bits`;
      case "counter-low":
        return `low 6 bits of counter ${data.counter}`;
      case "random":
        return "fresh random bits";
      case "sign":
        return "always zero: the ID is positive as a signed 64-bit integer";
      case "worker":
        return `${piece.width}-bit worker ID`;
      case "sequence":
        return scheme === "snowflake" && snowflakeLayout.tick_ms !== 1
          ? `position within the ${snowflakeLayout.tick_ms} ms tick`
          : "position within the millisecond";
      case "burst":
        return `${piece.width} bits: position within the millisecond`;
      case "node":
        // The field's own width: short60's IDs say nothing of node_bits.
        return `${piece.width}-bit node ID`;
      case "offset":
        return piece.value ? "object in a transaction" : "the transaction itself";
      default:
        return ABOUT[piece.key] || "";
    }
  }

  // -- decoding ---------------------------------------------------------------------------
  const form = $("decode-form");
  const idInput = $("id-input");
  const schemeSelect = $("scheme-select");
  const nodeBitsInput = $("node-bits");
  let decoded = false; // a result (or error) is showing: re-decode when options change
  const decodes = latestOnly();

  function syncNodeBits() {
    const scheme = schemeSelect.value;
    const usable = scheme === "" || scheme === "elastic64";
    nodeBitsInput.disabled = !usable;
    nodeBitsInput.closest(".field").classList.toggle("is-disabled", !usable);
    nodeBitsInput.required = scheme === "elastic64";
  }

  async function decode() {
    const text = idInput.value.trim();
    const scheme = schemeSelect.value;
    const nodeBits = nodeBitsInput.value.trim();
    const errorBox = $("decode-error");
    const ticket = decodes.start(); // whatever was under way is superseded, even by nothing
    if (!text) {
      $("decode-button").disabled = false;
      form.removeAttribute("aria-busy");
      $("decode-result").hidden = true;
      showError(errorBox, new ApiError(0, "nothing to decode", "Paste or type an ID first."));
      idInput.focus();
      return;
    }
    const query = new URLSearchParams();
    if (scheme) query.set("scheme", scheme);
    // Guessing reads decimal digits as elastic64 only when a width is given.
    if (nodeBits && (scheme === "elastic64" || (scheme === "" && /^\d+$/.test(text)))) {
      query.set("node_bits", nodeBits);
    }
    const qs = query.toString();
    showInAddress(text, query);
    $("decode-button").disabled = true;
    form.setAttribute("aria-busy", "true");
    try {
      const data = await api(`v1/decode/${encodeURIComponent(text)}${qs ? `?${qs}` : ""}`, ticket.signal);
      if (!ticket.current()) return;
      showError(errorBox, null);
      render(data);
      $("decode-status").textContent = `Decoded ${data.id} as ${data.scheme}.`;
      showHolder(data, ticket);
    } catch (error) {
      if (!ticket.current()) return;
      $("decode-result").hidden = true;
      showError(errorBox, error);
      $("decode-status").textContent = "";
    } finally {
      if (ticket.current()) {
        decoded = true;
        $("decode-button").disabled = false;
        form.removeAttribute("aria-busy");
        markSelectedMinted();
      }
    }
  }

  /** Who minted the decoded ID (``/v1/whois``): the process that held its identity then. */
  async function showHolder(data, ticket) {
    const line = $("result-holder");
    line.replaceChildren(el("span", { class: "muted" }, "Looking up who minted it…"));
    const query = new URLSearchParams({ scheme: data.scheme });
    if (data.node_bits) query.set("node_bits", String(data.node_bits));
    try {
      const holder = await api(`v1/whois/${encodeURIComponent(data.id)}?${query}`, ticket.signal);
      if (!ticket.current()) return;
      line.replaceChildren(
        "Minted by ",
        el("span", { class: "mono" }, `${holder.host} pid ${holder.pid}`),
        holder.pod ? ` in pod ${holder.pod}` : "",
        ", whose claim ran from ",
        formatMs(holder.first_ms),
        " to ",
        formatMs(holder.last_ms),
        ".",
      );
    } catch (error) {
      if (!ticket.current() || error.name === "AbortError") return;
      line.replaceChildren(el("span", { class: "muted" }, `Who minted it: ${error.detail || error.message}`));
    }
  }

  /** The decoded ID in the address bar (?id=...&scheme=...), so the page can be shared. */
  function showInAddress(text, query) {
    const params = new URLSearchParams(window.location.search);
    params.set("id", text);
    for (const name of ["scheme", "node_bits"]) {
      if (query.has(name)) params.set(name, query.get(name));
      else params.delete(name);
    }
    try {
      window.history.replaceState(null, "", `${window.location.pathname}?${params}${window.location.hash}`);
    } catch {
      // an address the browser will not rewrite (e.g. a file: URL): keep it as it is
    }
  }

  /** Decode what ?id= (with ?scheme= and ?node_bits=) names, when the page opens with it. */
  function decodeFromAddress() {
    const params = new URLSearchParams(window.location.search);
    const text = (params.get("id") || "").trim();
    if (!text) return false;
    idInput.value = text;
    const scheme = params.get("scheme") || "";
    const known = [...schemeSelect.options].map((option) => option.value).filter(Boolean);
    if (scheme && !known.includes(scheme)) {
      // Decoding as another scheme than the address names would show a wrong answer.
      showError(
        $("decode-error"),
        new ApiError(0, "unknown scheme", `The address asks for scheme “${scheme}”; choose one of ${known.join(", ")}.`),
      );
      decoded = true;
      return true;
    }
    schemeSelect.value = scheme;
    const nodeBits = params.get("node_bits");
    if (nodeBits) nodeBitsInput.value = nodeBits;
    syncNodeBits();
    decode();
    return true;
  }

  function render(data) {
    const scheme = data.scheme;
    const totalBits = BITS[scheme];
    const nodeBits = Number(data.node_bits || 0);
    const value = idToBigInt(scheme, String(data.id));
    const layout = LAYOUTS[scheme](nodeBits);
    const parts = cut(value, layout, totalBits);
    const width = Math.ceil(totalBits / 4);

    $("result-title").textContent = String(data.id);
    $("result-summary").textContent = SUMMARIES[scheme];

    // Fields table: exactly what the server said.
    const rows = Object.entries(data).map(([name, fieldValue]) =>
      el(
        "tr",
        { "data-field": name },
        el("th", { scope: "row" }, name),
        el("td", { class: "value mono" }, String(fieldValue)),
        el("td", { class: "about" }, name === "mode" ? modeAbout(fieldValue) : ABOUT[name] || ""),
      ),
    );
    $("fields").tBodies[0].replaceChildren(...rows);

    // Cross-check the server's fields against the bits.
    const ours = derive(scheme, parts, value, nodeBits);
    const disagree = Object.entries(ours)
      .filter(([name, mine]) => name in data && String(data[name]) !== String(mine))
      .map(([name, mine]) => `${name}: server ${data[name]}, bits ${mine}`);
    const warning = $("decode-warning");
    warning.hidden = disagree.length === 0;
    warning.textContent = disagree.length ? `The bits and the server disagree on ${disagree.join("; ")}.` : "";

    // Bit picture: groups of 8 bits counted from bit 0, most significant first.
    const bits = value.toString(2).padStart(totalBits, "0");
    const fieldOf = new Array(totalBits);
    for (const piece of parts) for (let b = piece.low; b <= piece.high; b += 1) fieldOf[b] = piece;
    const groups = [];
    for (let top = totalBits - 1, bottom; top >= 0; top = bottom - 1) {
      bottom = top - (top % 8);
      // A short top group (short60's bits 59..56) sits in the low columns.
      const firstColumn = 8 - (top - bottom);
      const cells = [];
      for (let b = top; b >= bottom; b -= 1) {
        const piece = fieldOf[b];
        const bit = bits[totalBits - 1 - b];
        const classes = ["bit", `f-${piece.colour}`, bit === "1" ? "one" : "zero"];
        if (b === piece.high) classes.push("field-start");
        if (b === top) classes.push("first");
        if (b === bottom) classes.push("last");
        cells.push(
          el("span", {
            class: classes.join(" "),
            style: `grid-column: ${firstColumn + (top - b)}`,
            "data-bit": b,
            "data-field": piece.key,
            title: `bit ${b}: ${piece.label} = ${bit}`,
            text: bit,
          }),
        );
      }
      groups.push(
        el(
          "div",
          { class: "byte" },
          el("span", { class: "byte-index", style: `grid-column: ${firstColumn}` }, top),
          el("span", { class: "byte-index low" }, bottom),
          ...cells,
        ),
      );
    }
    const picture = $("bits");
    picture.replaceChildren(...groups);
    picture.setAttribute("role", "img");
    picture.setAttribute(
      "aria-label",
      `${totalBits} bits, most significant first: ` +
        parts.map((s) => `${s.label} bits ${s.high} to ${s.low} = ${s.value}`).join("; "),
    );
    $("bits-caption").replaceChildren(
      el("strong", {}, `${totalBits} bits`),
      " · 0x",
      el("span", { class: "mono" }, value.toString(16).padStart(width, "0")),
      " · ",
      el("span", { class: "mono" }, value.toString(10)),
    );

    // Legend: one row per segment.
    const legendRows = parts.map((s) =>
      el(
        "tr",
        { "data-field": s.key },
        el(
          "th",
          { scope: "row" },
          el(
            "span",
            { class: "legend-name" },
            el("span", { class: `swatch f-${s.colour}`, "aria-hidden": "true" }),
            el("span", {}, s.label),
          ),
        ),
        el("td", { class: "mono nowrap" }, s.width === 1 ? `${s.high}` : `${s.high}–${s.low}`, el("span", { class: "muted" }, ` (${s.width})`)),
        el("td", { class: "value mono" }, s.value.toString()),
        el("td", { class: "about" }, meaning(scheme, s, data)),
      ),
    );
    $("legend").tBodies[0].replaceChildren(...legendRows);
    $("decode-result").hidden = false;
  }

  function modeAbout(mode) {
    return mode === "spread"
      ? "timestamp bit-reversed: consecutive IDs spread over the key space"
      : "timestamp as is: IDs sort by time";
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    decode();
  });
  // Decode an ID a button offers, in its scheme (and width) where the button knows them.
  function decodeOffered(id, scheme, nodeBits) {
    idInput.value = id;
    if (scheme) schemeSelect.value = scheme;
    if (nodeBits) nodeBitsInput.value = nodeBits;
    syncNodeBits();
    return decode();
  }

  // An empty page offers one ID of each scheme to decode.
  $("examples").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-example]");
    if (button) decodeOffered(button.dataset.id, button.dataset.scheme, button.dataset.nodeBits);
  });
  schemeSelect.addEventListener("change", () => {
    syncNodeBits();
    if (decoded && idInput.value.trim()) decode();
  });
  nodeBitsInput.addEventListener("change", () => {
    if (decoded && idInput.value.trim()) decode();
  });

  // -- minting ----------------------------------------------------------------------------
  let mintedScheme = null;
  const mints = latestOnly();

  function markSelectedMinted() {
    const current = idInput.value.trim();
    for (const button of document.querySelectorAll("#minted button")) {
      button.setAttribute("aria-current", button.dataset.id === current ? "true" : "false");
    }
  }

  /** What a failed mint leaves: its error, and no IDs of an earlier mint under it. */
  function mintFailed(error) {
    showError($("mint-error"), error);
    $("minted").replaceChildren();
    $("mint-summary").textContent = "";
  }

  async function mint() {
    const countInput = $("mint-count");
    const count = countInput.value.trim();
    const ticket = mints.start();
    if (!count) {
      $("mint-button").disabled = false;
      const most = countInput.max ? ` to ${countInput.max}` : " or more";
      mintFailed(new ApiError(0, "how many?", `Give how many IDs to mint: 1${most}.`));
      countInput.focus();
      return;
    }
    const errorBox = $("mint-error");
    $("mint-button").disabled = true;
    try {
      const data = await api(`v1/ids?count=${encodeURIComponent(count)}`, ticket.signal);
      if (!ticket.current()) return;
      showError(errorBox, null);
      mintedScheme = data.scheme;
      showServerScheme(data.scheme);
      const items = data.ids.map((id) =>
        el(
          "li",
          {},
          el("button", { type: "button", class: "id-button mono", "data-id": id, title: `Decode ${id}` }, id),
        ),
      );
      $("minted").replaceChildren(...items);
      const n = data.ids.length;
      $("mint-summary").textContent = `${n} ${data.scheme} ID${n === 1 ? "" : "s"}: choose one to decode it.`;
      markSelectedMinted();
    } catch (error) {
      if (!ticket.current()) return;
      mintFailed(error);
      if (error instanceof ApiError && error.status === 503) refreshHealth();
    } finally {
      if (ticket.current()) $("mint-button").disabled = false;
    }
  }

  $("mint-form").addEventListener("submit", (event) => {
    event.preventDefault();
    mint();
  });
  $("minted").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-id]");
    if (!button) return;
    decodeOffered(button.dataset.id, mintedScheme).then(() => {
      // In the one-column layout the result is far above the list: bring it into view.
      const card = document.querySelector(".decode-card");
      const top = card.getBoundingClientRect().top;
      if (top < 0 || top > window.innerHeight * 0.6) card.scrollIntoView({ block: "start" });
    });
  });

  /** The largest count this server gives at once, from its API description. */
  async function learnMaxCount() {
    try {
      const described = await api("openapi.json");
      const count = described.paths["/v1/ids"].get.parameters.find((p) => p.name === "count");
      const most = Number(count.schema.maximum);
      if (Number.isInteger(most) && most > 0) $("mint-count").max = String(most);
      const snowflake = described.components.schemas.DecodedSnowflake;
      if (snowflake && snowflake["x-layout"]) snowflakeLayout = snowflake["x-layout"];
    } catch {
      // keep the page's own limit; the server says so if a count is too large
    }
  }

  // -- server state ---------------------------------------------------------------------------
  function showServerScheme(scheme) {
    const badge = $("server-scheme");
    badge.textContent = scheme;
    badge.hidden = !scheme;
  }

  async function refreshHealth() {
    const pill = $("health");
    const label = $("health-text");
    try {
      await api("readyz");
      pill.className = "pill pill-ok";
      label.textContent = "healthy";
      pill.title = "GET /readyz: 200 ok";
    } catch (error) {
      pill.className = "pill pill-bad";
      label.textContent = error.status ? `unavailable: ${error.detail}` : "unreachable";
      pill.title = error.detail || "";
    }
  }

  /** A time as ISO 8601, free to wrap between the date and the time of day. */
  function formatMs(ms) {
    if (ms === null || ms === undefined) return "—";
    const date = new Date(Number(ms));
    if (Number.isNaN(date.getTime())) return String(ms);
    const [day, time] = date.toISOString().replace(".000Z", "Z").split("T");
    return el("span", {}, `${day}T`, el("wbr"), time);
  }

  // The claims' coordinator: the default names this host's pool, whose directory
  // the claims' rows give.
  function describeCoordinator(data) {
    if (!data.coordinator) return el("span", { class: "muted" }, "none (these IDs need no claimed identity)");
    if (data.coordinator !== "local://") return el("code", {}, data.coordinator);
    const claimed = data.claims.find((claim) => claim.coordinator);
    const where = claimed ? claimed.coordinator.replace(/^.* at /, "") : data.coordinator;
    return el("span", {}, "this host’s pool, the default (", el("code", {}, where), ")");
  }

  async function refreshClaims() {
    const data = await api("v1/claims");
    showServerScheme(data.scheme);
    if (!mintedScheme) mintedScheme = data.scheme;
    $("coordinator").replaceChildren("Coordinator: ", describeCoordinator(data));
    const lifetime = $("lifetime");
    lifetime.hidden = data.time_runs_out_ms === undefined;
    if (!lifetime.hidden) {
      const yearsLeft = (data.time_runs_out_ms - Date.now()) / (365.25 * 86400000);
      lifetime.replaceChildren(
        `${data.scheme} IDs can hold times up to `,
        formatMs(data.time_runs_out_ms),
        ` (${Math.round(yearsLeft)} years from now).`,
      );
    }
    // An elastic64 server's claims name their width: use it to decode minted IDs.
    const width = data.claims.map((claim) => claim.node_bits).find((bits) => bits);
    if (data.scheme === "elastic64" && width && !nodeBitsInput.value) nodeBitsInput.value = String(width);
    const rows = data.claims.map((claim) => {
      const state = el(
        "td",
        {},
        el("span", { class: `tag ${claim.usable ? "tag-ok" : "tag-bad"}` }, claim.state),
        el("span", { class: "visually-hidden" }, claim.usable ? " (usable)" : " (not usable)"),
      );
      if (claim.state !== "static") {
        state.append(el("div", { class: "mono small-text", title: claim.coordinator || "" }, "≤ ", formatMs(claim.high_water_mark_ms)));
      }
      if (claim.pool) {
        state.append(el("div", { class: "small-text pool" }, `pool: ${claim.pool.free} of ${claim.pool.size} free`));
      }
      if (claim.problem) state.append(el("div", { class: "problem" }, claim.problem));
      return el(
        "tr",
        { class: claim.usable ? "" : "unusable" },
        el("th", { scope: "row", class: "mono" }, claim.worker === undefined ? claim.identity : `worker ${claim.worker}: ${claim.identity}`),
        state,
      );
    });
    $("claims").tBodies[0].replaceChildren(...rows);
  }

  async function refreshServices() {
    const data = await api("v1/services");
    const box = $("services");
    if (!data.configured) {
      box.replaceChildren(
        el("p", { class: "muted small-text" }, "No discovery tree configured (start the server with ", el("code", {}, "--discovery zk://…"), ")."),
      );
      return;
    }
    const names = Object.keys(data.services || {});
    if (!names.length) {
      box.replaceChildren(el("p", { class: "muted small-text" }, "No services are registered."));
      return;
    }
    const sections = names.sort().map((name) => {
      const rows = data.services[name].map((instance) =>
        el(
          "tr",
          {},
          el("th", { scope: "row", class: "mono" }, String(instance.node)),
          el("td", { class: "mono" }, instance.host ? `${instance.host}:${instance.port ?? "?"}` : "—"),
          el("td", { class: "mono small-text" }, (instance.endpoints || []).join(", ") || "—"),
          el(
            "td",
            { class: "small-text" },
            Object.entries(instance.metadata || {})
              .map(([k, v]) => `${k}=${v}`)
              .join(", ") || "—",
          ),
        ),
      );
      return el(
        "div",
        { class: "table-wrap service" },
        el(
          "table",
          { class: "compact" },
          el("caption", {}, name, el("span", { class: "muted" }, ` · ${rows.length} instance${rows.length === 1 ? "" : "s"}`)),
          el(
            "thead",
            {},
            el("tr", {}, el("th", { scope: "col" }, "Node"), el("th", { scope: "col" }, "Address"), el("th", { scope: "col" }, "Endpoints"), el("th", { scope: "col" }, "Metadata")),
          ),
          el("tbody", {}, ...rows),
        ),
      );
    });
    box.replaceChildren(...sections);
  }

  async function refreshServer() {
    const button = $("refresh");
    button.disabled = true;
    const errors = [];
    // What could not be loaded says so, rather than keeping an old or a "…" answer.
    const notLoaded = (error) => el("p", { class: "muted small-text" }, `Not loaded: ${error.error || "error"}${error.status ? ` (HTTP ${error.status})` : ""}.`);
    await Promise.all([
      refreshHealth(),
      refreshClaims().catch((error) => {
        errors.push(error);
        $("coordinator").replaceChildren(notLoaded(error));
        $("claims").tBodies[0].replaceChildren();
      }),
      refreshServices().catch((error) => {
        errors.push(error);
        $("services").replaceChildren(notLoaded(error));
      }),
    ]);
    showError($("server-error"), errors[0] || null);
    $("refreshed").textContent = `Updated ${new Date().toLocaleTimeString()}`;
    button.disabled = false;
  }

  $("refresh").addEventListener("click", refreshServer);

  // -- token ---------------------------------------------------------------------------------
  function openTokenPanel() {
    $("token-panel").open = true;
  }

  function showTokenState() {
    $("token-state").textContent = token() ? "(set)" : "(none)";
  }

  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token-input").value.trim();
    try {
      if (value) sessionStorage.setItem(TOKEN_KEY, value);
      else sessionStorage.removeItem(TOKEN_KEY);
    } catch {
      // storage disabled: nothing to keep
    }
    $("token-input").value = "";
    showTokenState();
    $("token-panel").open = false;
    tokenChanged();
  });
  $("token-clear").addEventListener("click", () => {
    try {
      sessionStorage.removeItem(TOKEN_KEY);
    } catch {
      // storage disabled
    }
    $("token-input").value = "";
    showTokenState();
    tokenChanged();
  });

  /** Another token: the server's panel again, and a decode shown is asked again (its
   * answer, a 401 say, was the old token's); a mint's 401 no longer holds. */
  function tokenChanged() {
    refreshServer();
    if (decoded && idInput.value.trim() && !$("decode-error").hidden) decode();
    const mintError = $("mint-error");
    if (!mintError.hidden && mintError.dataset.status === "401") showError(mintError, null);
  }

  // -- start ---------------------------------------------------------------------------------
  syncNodeBits();
  showTokenState();
  refreshServer();
  // The address's ID is drawn once the layouts this server reads are known.
  learnMaxCount().finally(decodeFromAddress);
})();
