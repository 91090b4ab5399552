// The seckill lab page: a product's live stock, a buy form, and load runs
// compared in charts. Plain JavaScript, no build step; the only library is
// Chart.js, served at vendor/ from static/vendor.
"use strict";

(() => {
  const $ = (sel) => document.querySelector(sel);

  // Polling periods. The product and its audit are read together, so that
  // the numbers shown side by side are of the same moment.
  const PRODUCT_MS = 500;
  // A product that does not exist is asked after less often, and without its
  // audit: the browser logs every 404 in the console, twice a beat otherwise.
  const MISSING_MS = 5000;
  const RUN_MS = 300;

  // The page watches product 1, the demo, unless the link names another:
  // /?product=42.
  const linked = Number(new URLSearchParams(location.search).get("product"));
  const homeProduct = Number.isSafeInteger(linked) && linked > 0 ? linked : 1;

  const state = {
    productID: homeProduct,
    product: null, // the last GET /api/products/:id
    locks: new Map(), // name → GET /api/locks entry
    modes: new Map(), // name → GET /api/modes entry
    runs: [], // finished runs, oldest first
    charts: {},
    running: null, // id of the run being polled
    timeline: null, // {run, data}: the timeline shown
    labProduct: 9001, // the lab's product; a run's answer says which it is
    polling: false,
    missing: null, // {id, at}: the product that answered 404, and when
    latest: null, // the order of the last purchase made here
    orders: [], // the earlier ones, newest first
    // The server's clock: offset (ms to add to Date.now()) from the product
    // answer with the smallest round trip, that rtt, and when it was taken.
    clock: null,
    salePhase: "", // the shown product's window: "", "before", "open" or "ended"
    course: null, // course.json: the lessons
    lessonRun: null, // {run, lesson, prediction}: the lab run a lesson started
    accountOptions: null, // GET /api/accounts/options: {demo, min_password, passkeys, passkey_origins}
    signupCaptcha: "", // the id of the captcha shown for a sign-up
    passkeys: null, // {origins}: the service's passkeys, when it and this browser have them
  };
  // The browser test and curious teachers read the charts from here.
  window.seckill = state;

  // api sends one JSON request. It never throws: the answer is
  // {ok, status, data}, where data is the API's body or, when there is none,
  // an error body of the API's shape.
  // TOKEN_KEY is where this tab keeps the token typed: the operator's, or
  // the class token a student holds.
  const TOKEN_KEY = "seckill.adminToken";

  // BUYER_KEY is where this browser keeps its signed-in buyer's session.
  const BUYER_KEY = "seckill.buyer";
  // AS_BUYER, as api's last argument, sends the signed-in buyer's token.
  const AS_BUYER = "buyer";
  // FIRST_NAMED_BUYER is the first id of a signed-in buyer (api.FirstNamedBuyer):
  // an order of one is read, paid and cancelled with the buyer's token.
  const FIRST_NAMED_BUYER = 3 * 2 ** 51;

  async function api(method, path, body, admin) {
    const headers = {};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const token = $("#token").value.trim();
    if (admin === AS_BUYER) {
      const b = buyerSession();
      if (b) headers.Authorization = "Bearer " + b.token;
    } else if (admin && token) headers.Authorization = "Bearer " + token;
    let res;
    try {
      res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      return { ok: false, status: 0, data: { code: "network", error: "the service did not answer: " + e.message } };
    }
    let data;
    try {
      data = await res.json();
    } catch {
      data = { code: "http_" + res.status, error: res.statusText || "no JSON in the answer" };
    }
    return { ok: res.ok, status: res.status, data };
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  function badge(verdict, big) {
    return el("span", { class: "badge " + verdict + (big ? " big-badge" : "") }, verdict || "–");
  }

  // TOKEN_HINT is the answer to an operator's request refused 401 (a lab
  // run, a reset): where the token is, in one sentence (issue 41, finding 2).
  const TOKEN_HINT = "Type the class or operator token at the top: the “seckill serving” line says both.";
  // refusal says why an operator's request was refused.
  // OPERATOR_HINT answers the operator's own requests (a reset, the
  // class's predictions), which the class token does not open.
  const OPERATOR_HINT = "Type the operator token at the top: the “seckill serving” line says it.";
  const refusal = (r, hint = TOKEN_HINT) => (r.status === 401 ? hint : r.data.code + ": " + r.data.error);

  const fmt = (n, digits = 0) =>
    n === undefined || n === null ? "–" : Number(n).toLocaleString("en-US", { maximumFractionDigits: digits });

  // setStatus writes a status line; source names who wrote it, so that the
  // poller clears only its own complaints.
  function setStatus(node, text, isError, source) {
    node.textContent = text;
    node.classList.toggle("error", !!isError);
    node.dataset.source = source || "";
  }

  // ---- Product panel -------------------------------------------------

  async function pollProduct() {
    if (state.polling) return; // a slow answer: skip a beat rather than pile up
    state.polling = true;
    try {
      await refreshProduct();
    } finally {
      state.polling = false;
    }
  }

  // tick is the periodic poll; explicit refreshes (a switch, a purchase, a
  // run's end) call pollProduct at once, whatever the product's state.
  function tick() {
    if (document.hidden) return;
    const m = state.missing;
    if (m && m.id === state.productID && Date.now() - m.at < MISSING_MS) return;
    pollProduct();
  }

  async function refreshProduct() {
    const id = state.productID;
    const missing = state.missing?.id === id;
    const [p, a] = await Promise.all([
      timed(api("GET", "/api/products/" + id)),
      missing ? null : api("GET", "/api/products/" + id + "/audit"),
    ]);
    if (id !== state.productID) return; // the user switched product meanwhile
    state.missing = p.status === 404 ? { id, at: Date.now() } : null;
    const status = $("#product-status");
    if (!p.ok) {
      state.product = null;
      if (p.status === 404) {
        setStatus(status, "Product " + id + " does not exist yet" +
          (id === state.labProduct ? ": the first lab run creates it." : "."), false, "poll");
      } else {
        setStatus(status, p.data.code + ": " + p.data.error, true, "poll");
      }
      return;
    }
    if (status.dataset.source === "poll") setStatus(status, "");
    state.product = p.data;
    noteServerClock(p);
    // A user id buys a lab product only; any other sells to the buyer signed in.
    $("#user-id-field").hidden = !p.data.lab;
    showCaptcha(p.data);
    renderProduct(p.data);
    if (a?.ok) renderAudit(a.data);
  }

  function renderProduct(p) {
    $("#stat-stock").textContent = fmt(p.stock);
    $("#stat-initial").textContent = fmt(p.initial);
    $("#stat-sold").textContent = fmt(p.sold);
    $("#total-fill").style.width = pct(p.stock, p.initial) + "%";

    // A shard starts with about initial/shards units; scale every bar to
    // that so that the bars compare with each other and with the start.
    const n = p.shards.length || 1;
    const scale = Math.max(Math.ceil(p.initial / n), ...p.shards.map((s) => s.stock), 1);
    const list = $("#shards");
    while (list.children.length > p.shards.length) list.lastElementChild.remove();
    p.shards.forEach((s, i) => {
      let li = list.children[i];
      if (!li) {
        li = el("li", {}, el("span", { class: "name" }), el("div", { class: "track", "aria-hidden": "true" }, el("div", { class: "fill" })), el("span", { class: "n" }));
        list.append(li);
      }
      li.title = s.key;
      li.querySelector(".name").textContent = "shard " + i;
      li.querySelector(".fill").style.width = pct(s.stock, scale) + "%";
      li.querySelector(".n").textContent = fmt(s.stock);
    });
    $("#product-meta").textContent = [
      "“" + p.name + "”", "lock " + p.lock, "mode " + p.mode, p.shards.length + " shards",
      "fallback " + (p.fallback ? "on" : "off"), "store " + p.store,
      // What a 202 survives: what Redis keeps of an answered write.
      "durability " + p.durability,
    ].join(" · ");
    $("#product-meta").title = p.durability_reason ? "Redis durability: " + p.durability_reason : "";
    $("#reserve").hidden = !p.reservation;
    const booked = $("#reservations");
    booked.hidden = !p.reservation;
    booked.textContent = p.reservation ? fmt(p.reservations ?? 0) + " reserved" : "";
    tickSaleWindow();
  }

  // ---- The sale window, on the server's clock --------------------------

  // timed notes when a request was sent and its answer read.
  function timed(request) {
    const sent = Date.now();
    return request.then((r) => ({ ...r, sent, received: Date.now() }));
  }

  // CLOCK_KEEP_MS is how long the best estimate of the server's clock is
  // kept before any newer one replaces it: this machine's clock may jump.
  const CLOCK_KEEP_MS = 60_000;

  // noteServerClock estimates the server's clock from a product answer: it
  // said "now" about half a round trip before the answer arrived. The
  // answer with the smallest round trip bounds the error best.
  function noteServerClock(r) {
    const serverNow = Date.parse(r.data.now);
    if (Number.isNaN(serverNow)) return;
    const rtt = r.received - r.sent;
    const c = state.clock;
    if (c && rtt > c.rtt && r.received - c.at < CLOCK_KEEP_MS) return;
    state.clock = { offset: serverNow + rtt / 2 - r.received, rtt, at: r.received };
  }

  const serverNow = () => Date.now() + (state.clock ? state.clock.offset : 0);

  // untilText says how long until a moment: "12.3 s" under a minute, else h:mm:ss.
  function untilText(ms) {
    if (ms < 60_000) return (Math.floor(ms / 100) / 10).toFixed(1) + " s";
    const s = Math.floor(ms / 1000);
    const h = Math.floor(s / 3600);
    const mmss = String(Math.floor(s / 60) % 60).padStart(h ? 2 : 1, "0") + ":" + String(s % 60).padStart(2, "0");
    return (h ? h + ":" : "") + mmss;
  }

  // tickSaleWindow shows the shown product's window and keeps the buy
  // button disabled outside it: enabled on the second it opens, without a
  // reload, and disabled again once it ends. Inside the window it enables
  // the button only on the way in, never during a purchase in flight.
  function tickSaleWindow() {
    const p = state.product;
    const starts = p?.starts_at ? Date.parse(p.starts_at) : NaN;
    const ends = p?.ends_at ? Date.parse(p.ends_at) : NaN;
    const now = serverNow();
    let phase = "", text = "";
    if (now < starts) {
      phase = "before";
      text = "opens in " + untilText(starts - now);
    } else if (now >= ends) {
      phase = "ended";
      text = "sale ended";
    } else if (!Number.isNaN(ends)) {
      phase = "open";
      text = "on sale, ends in " + untilText(ends - now);
    }
    const out = $("#sale-window");
    out.hidden = text === "";
    out.textContent = text;
    out.classList.toggle("ended", phase === "ended");
    const btn = $("#buy");
    if (phase === "before" || phase === "ended") btn.disabled = true;
    else if (state.salePhase === "before" || state.salePhase === "ended") btn.disabled = false;
    // Reserving ends when the sale starts.
    if (!state.reserving) $("#reserve").disabled = phase !== "before";
    state.salePhase = phase;
  }

  function renderAudit(a) {
    const over = $("#stat-oversold");
    over.textContent = fmt(a.oversold);
    over.classList.toggle("alarm", a.oversold > 0);
    const lost = $("#stat-lost");
    lost.textContent = fmt(a.lost_updates);
    lost.classList.toggle("alarm", a.lost_updates !== 0);
    $("#stat-queued").textContent = fmt(a.queued);
    $("#stat-unpaid").textContent = fmt(a.unpaid);
    $("#stat-paid").textContent = fmt(a.paid);
    $("#stat-cancelled").textContent = fmt(a.cancelled);
    const b = $("#stat-audit");
    b.className = "badge " + a.verdict;
    b.textContent = a.verdict;
    b.title = a.orders + " orders in the database and " + a.queued + " queued for " + a.initial + " units, " +
      a.remaining + " left in the store" +
      (a.replaying ? "; " + a.replaying + " of the queued are written already and being acknowledged" : "") +
      (a.rebuilt ? "; rebuilt from the orders after Redis lost the stock, not counted: " + a.rebuilt.uncounted : "");
  }

  // A note under the mode when it needs one: what a 202 promises.
  function showModeNote() {
    $("#mode-note").hidden = $("#lab-mode").value !== "async";
    $("#mq-note").hidden = $("#lab-mode").value !== "mq";
  }

  const pct = (v, of) => (of > 0 ? Math.max(0, Math.min(100, (100 * v) / of)) : 0);

  // productOptions offers the home product, the demo, the lab's and the one
  // watched, once each, named for what they are: a link may name the lab's.
  function productOptions() {
    const what = (id) => {
      if (id === 1) return "demo";
      if (id === state.labProduct) return "lab runs";
      return id === homeProduct ? "from the link" : "";
    };
    const ids = [...new Set([homeProduct, 1, state.labProduct, state.productID])];
    const sel = $("#product-id");
    sel.replaceChildren(...ids.map((id) => el("option", { value: String(id) }, id + (what(id) ? " · " + what(id) : ""))));
    sel.value = String(state.productID);
  }

  function watch(id) {
    state.productID = id;
    productOptions();
    $("#shards").replaceChildren();
    for (const s of ["#stat-stock", "#stat-initial", "#stat-sold", "#stat-oversold", "#stat-lost", "#stat-unpaid", "#stat-paid", "#stat-cancelled"]) {
      $(s).textContent = "–";
    }
    const b = $("#stat-audit");
    b.className = "badge";
    b.textContent = "–";
    $("#total-fill").style.width = "0";
    $("#product-meta").textContent = "";
    setStatus($("#product-status"), "");
    // The last purchase was of the product watched before: its outcome would
    // read as this one's.
    $("#buy-result").className = "outcome";
    $("#buy-result").replaceChildren();
    // The order stays in the list, which says its product.
    if (state.latest) state.orders.unshift(state.latest);
    state.orders.length = Math.min(state.orders.length, MAX_ORDERS);
    state.latest = null;
    renderOrders();
    pollProduct();
  }

  // askReset shows the reset's confirmation: a new sale is never one click
  // (a page framed by another site could have the operator make it).
  function askReset() {
    if (!state.product) {
      setStatus($("#product-status"), "Nothing to reset: the product is not loaded.", true);
      return;
    }
    $("#reset-word").value = "";
    $("#reset-confirm").hidden = false;
    $("#reset-word").focus();
  }

  async function resetProduct(ev) {
    ev.preventDefault();
    const p = state.product;
    const status = $("#product-status");
    if ($("#reset-word").value.trim().toLowerCase() !== "reset") {
      setStatus(status, "Not reset: type reset to confirm a new sale.", true);
      return;
    }
    $("#reset-confirm").hidden = true;
    if (!p) {
      setStatus(status, "Nothing to reset: the product is not loaded.", true);
      return;
    }
    const btn = $("#reset");
    btn.disabled = true;
    const r = await api("POST", "/api/products", {
      id: p.id, name: p.name, stock: p.initial, shards: p.shards.length, lock: p.lock, mode: p.mode, fallback: p.fallback, lab: p.lab,
      pay_timeout_ms: p.pay_timeout_ms, lifecycle: p.lifecycle, starts_at: p.starts_at, ends_at: p.ends_at, reset: true,
    }, true);
    btn.disabled = false;
    if (r.ok) {
      setStatus(status, "Reset: sale " + (p.sale + 1) + " starts with " + fmt(p.initial) + " units; the orders of sale " + p.sale + " stay.");
      pollProduct();
    } else {
      setStatus(status, "Reset refused. " + refusal(r, OPERATOR_HINT), true);
    }
  }

  // ---- Buyer's sign-in -------------------------------------------------

  // buyerSession is the signed-in buyer kept in this browser, or null.
  function buyerSession() {
    try {
      const b = JSON.parse(localStorage.getItem(BUYER_KEY) || "null");
      return b && Date.parse(b.expires_at) > Date.now() ? b : null;
    } catch {
      return null; // storage refused, or not JSON
    }
  }

  // SIGN_IN_FIRST is Buy's refusal without a buyer signed in, which a
  // sign-in answers: showBuyer takes it away then.
  const SIGN_IN_FIRST = "Sign in first: a product that is not a lab product sells to a signed-in buyer.";

  function showBuyer() {
    const b = buyerSession();
    const out = $("#buy-result");
    if (b && out.textContent === SIGN_IN_FIRST) {
      out.className = "outcome";
      out.replaceChildren();
    }
    $("#signin-status").textContent = b
      ? "Signed in as " + b.name + " (buyer " + b.buyer_id + ") until " + new Date(b.expires_at).toLocaleTimeString()
      : "Not signed in.";
    $("#signout").hidden = !b;
    $("#passkey-add").hidden = !b || !state.passkeys;
    $("#passkey-signin").hidden = !!b || !state.passkeys;
  }

  // credentials are the sign-in form's name and password; no password is
  // the demo sign-in by name, which the service takes only with demo
  // accounts on.
  function credentials() {
    const c = { name: $("#buyer-name").value };
    const pw = $("#buyer-password").value;
    if (pw) c.password = pw;
    return c;
  }

  // loadAccountOptions reads the service's rules for accounts: the
  // shortest password it takes, whether the demo sign-in is on, and
  // whether it has passkeys: their buttons show when it has and this
  // browser can make them.
  async function loadAccountOptions() {
    const r = await api("GET", "/api/accounts/options");
    if (!r.ok) return;
    state.accountOptions = r.data;
    if (r.data.passkeys && window.PublicKeyCredential) {
      state.passkeys = { origins: r.data.passkey_origins || [] };
    }
    showBuyer();
  }

  // signUp makes an account with the form's name and password, then signs
  // it in. Past its network's first few accounts the service asks for a
  // captcha (captcha_required): the page shows one and the next Sign up
  // sends it. A captcha is tried once, right or wrong: after a refusal
  // that spent it, another picture.
  async function signUp() {
    const body = credentials();
    const min = state.accountOptions?.min_password || 0;
    if ((body.password || "").length < min) {
      $("#signin-status").textContent = "Sign-up needs a password of at least " + min + " characters.";
      return;
    }
    if (state.signupCaptcha) {
      body.captcha_id = state.signupCaptcha;
      body.captcha = $("#signup-captcha").value.trim();
    }
    const r = await api("POST", "/api/accounts", body);
    if (!r.ok) {
      const asked = r.data.code === "captcha_required";
      if (asked || body.captcha_id) await newSignupCaptcha();
      $("#signin-status").textContent = asked
        ? "Type the six digits in the picture, then Sign up again."
        : "Sign-up refused: " + r.data.error;
      return;
    }
    state.signupCaptcha = "";
    $("#signup-captcha-field").hidden = true;
    await signIn();
  }

  // newSignupCaptcha shows a fresh captcha for an account.
  async function newSignupCaptcha() {
    $("#signup-captcha-field").hidden = false;
    state.signupCaptcha = await drawCaptcha("#signup-captcha", { for: "account" });
  }

  // signOut ends the session at the service, then forgets it here, and
  // the signed-in buyers' orders with it: on a shared computer the next
  // person would see them, with Pay and Cancel buttons their token no
  // longer opens. Lab orders, which anyone may read, stay.
  async function signOut() {
    await api("DELETE", "/api/sessions/current", undefined, AS_BUYER);
    try {
      localStorage.removeItem(BUYER_KEY);
    } catch {
      // nothing kept
    }
    state.orders = state.orders.filter((o) => asOwner(o) !== AS_BUYER);
    if (asOwner(state.latest) === AS_BUYER) {
      state.latest = null;
      $("#buy-result").className = "outcome";
      $("#buy-result").replaceChildren();
    }
    renderOrders();
    showBuyer();
  }

  async function signIn(ev) {
    ev?.preventDefault();
    const r = await api("POST", "/api/sessions", credentials());
    $("#buyer-password").value = "";
    keepSession(r, "Sign-in refused: ");
  }

  // keepSession keeps a sign-in's session in this browser, or says why
  // there is none.
  function keepSession(r, refused) {
    if (!r.ok) {
      $("#signin-status").textContent = refused + r.data.error;
      return;
    }
    try {
      localStorage.setItem(BUYER_KEY, JSON.stringify(r.data));
    } catch {
      // Storage refused: the sign-in lasts as long as nothing needs it again.
    }
    showBuyer();
  }

  // ---- Passkeys: the service's options and the browser's credentials
  // travel as JSON, their binary fields base64url.

  function fromB64url(s) {
    const b64 = s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4);
    return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  }

  function toB64url(buf) {
    let s = "";
    for (const b of new Uint8Array(buf)) s += String.fromCharCode(b);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // passkeyHere says whether this page's origin is one the service takes
  // passkeys from (a passkey is bound to its site: http://127.0.0.1 is
  // not http://localhost); when not, it says where to go.
  function passkeyHere() {
    if (state.passkeys.origins.includes(location.origin)) return true;
    $("#signin-status").textContent = "Passkeys work on " + state.passkeys.origins.join(" or ") + ": open the page there.";
    return false;
  }

  // addPasskey makes a passkey for the signed-in buyer on this device.
  async function addPasskey() {
    if (!passkeyHere()) return;
    const r = await api("POST", "/api/accounts/current/passkeys/begin", undefined, AS_BUYER);
    if (!r.ok) {
      forgetExpired(r);
      $("#signin-status").textContent = "Adding a passkey refused: " + r.data.error;
      return;
    }
    const pk = r.data.publicKey;
    pk.challenge = fromB64url(pk.challenge);
    pk.user.id = fromB64url(pk.user.id);
    for (const c of pk.excludeCredentials || []) c.id = fromB64url(c.id);
    let cred;
    try {
      cred = await navigator.credentials.create({ publicKey: pk });
    } catch (e) {
      $("#signin-status").textContent = "No passkey made: " + e.message;
      return;
    }
    const done = await api("POST", "/api/accounts/current/passkeys/finish", {
      id: cred.id, rawId: toB64url(cred.rawId), type: cred.type,
      response: {
        clientDataJSON: toB64url(cred.response.clientDataJSON),
        attestationObject: toB64url(cred.response.attestationObject),
        transports: cred.response.getTransports ? cred.response.getTransports() : [],
      },
      clientExtensionResults: cred.getClientExtensionResults(),
    }, AS_BUYER);
    $("#signin-status").textContent = done.ok
      ? "Passkey added: next time, Sign in with a passkey."
      : "Passkey refused: " + done.data.error;
  }

  // passkeySignIn signs in with a passkey this device keeps: no name typed.
  async function passkeySignIn() {
    if (!passkeyHere()) return;
    const r = await api("POST", "/api/sessions/passkey/begin");
    if (!r.ok) {
      $("#signin-status").textContent = "Passkey sign-in refused: " + r.data.error;
      return;
    }
    const pk = r.data.publicKey;
    pk.challenge = fromB64url(pk.challenge);
    for (const c of pk.allowCredentials || []) c.id = fromB64url(c.id);
    let cred;
    try {
      cred = await navigator.credentials.get({ publicKey: pk });
    } catch (e) {
      $("#signin-status").textContent = "No passkey used: " + e.message;
      return;
    }
    const res = cred.response;
    const done = await api("POST", "/api/sessions/passkey/finish", {
      id: cred.id, rawId: toB64url(cred.rawId), type: cred.type,
      response: {
        clientDataJSON: toB64url(res.clientDataJSON),
        authenticatorData: toB64url(res.authenticatorData),
        signature: toB64url(res.signature),
        userHandle: res.userHandle ? toB64url(res.userHandle) : null,
      },
      clientExtensionResults: cred.getClientExtensionResults(),
    });
    keepSession(done, "Passkey sign-in refused: ");
  }

  // asOwner is how a request about order o authenticates: a signed-in
  // buyer's order with the token, a lab order with none.
  function asOwner(o) {
    return o && o.user_id >= FIRST_NAMED_BUYER ? AS_BUYER : undefined;
  }

  // forgetExpired drops the kept session when the service refused its token.
  function forgetExpired(r) {
    if (r.status === 401 && (r.data.code === "sign_in_required" || r.data.code === "no_account")) {
      try {
        localStorage.removeItem(BUYER_KEY);
      } catch {
        // nothing kept
      }
      showBuyer();
    }
  }

  // labWatched says whether the product watched takes a user id.
  function labWatched() {
    return !!state.product?.lab;
  }

  // ---- Buy -------------------------------------------------------------

  // A product with a purchase path sells only with a one-time token, asked
  // for just before the purchase (from the opening second), for a solved
  // captcha when the product asks for one. A captcha is tried once, right
  // or wrong: the page shows another after every try.
  async function pathFor(p) {
    if (!p?.path) return { ok: true };
    const body = {};
    if (p.captcha) {
      body.captcha_id = state.captcha || "";
      body.captcha = $("#captcha").value.trim();
    }
    const r = await api("POST", "/api/products/" + p.id + "/path", body, AS_BUYER);
    if (p.captcha) newCaptcha();
    return r;
  }

  // showCaptcha shows the captcha field for a product that asks for one,
  // with a picture, drawn once per product watched.
  function showCaptcha(p) {
    const field = $("#captcha-field");
    const want = Boolean(p?.captcha);
    if (field.hidden === !want && (!want || (state.captchaFor === p.id && state.captcha))) return;
    field.hidden = !want;
    if (want) {
      state.captchaFor = p.id;
      newCaptcha();
    }
  }

  async function newCaptcha() {
    state.captcha = await drawCaptcha("#captcha", { product_id: state.captchaFor }, AS_BUYER);
  }

  // drawCaptcha asks for a captcha (POST /api/captcha with body) and shows
  // its picture beside the field named by input, emptied; it returns the
  // captcha's id, or "" when the service made none (the picture says why).
  async function drawCaptcha(input, body, as) {
    $(input).value = "";
    const img = $(input + "-img");
    const r = await api("POST", "/api/captcha", body, as);
    if (!r.ok) {
      img.alt = "No captcha: " + r.data.error;
      img.removeAttribute("src");
      return "";
    }
    img.src = r.data.image;
    return r.data.captcha_id;
  }

  // buyerReady reports whether the page has a buyer to act for: a user id
  // on a lab product, a signed-in buyer on any other; else it says so in out.
  function buyerReady(out, lab, user) {
    if (lab && (!Number.isSafeInteger(user) || user < 1 || user >= FIRST_NAMED_BUYER)) {
      out.className = "outcome refused";
      out.textContent = "The user id must be a positive whole number below " + FIRST_NAMED_BUYER + ".";
      return false;
    }
    if (!lab && !buyerSession()) {
      out.className = "outcome refused";
      out.textContent = SIGN_IN_FIRST;
      return false;
    }
    return true;
  }

  async function buy(ev) {
    ev.preventDefault();
    const out = $("#buy-result");
    const lab = labWatched();
    const user = Number($("#user-id").value);
    if (!buyerReady(out, lab, user)) return;
    const btn = $("#buy");
    btn.disabled = true;
    const body = lab ? { user_id: user, product_id: state.productID } : { product_id: state.productID };
    let r = await pathFor(state.product);
    if (r.ok && r.data?.path_token) body.path_token = r.data.path_token;
    if (r.ok) r = await api("POST", "/api/orders", body, lab ? undefined : AS_BUYER);
    btn.disabled = false;
    forgetExpired(r);
    if (r.ok) {
      // The id is a string in the JSON and stays one: it exceeds 2^53.
      if (state.latest) state.orders.unshift(state.latest);
      state.orders.length = Math.min(state.orders.length, MAX_ORDERS);
      state.latest = r.data;
      renderOrders();
      if (r.status === 202) followQueued(r.data);
    } else {
      // The refusal takes the box: the order shown there moves to the list.
      if (state.latest) state.orders.unshift(state.latest);
      state.orders.length = Math.min(state.orders.length, MAX_ORDERS);
      state.latest = null;
      renderOrders();
      out.className = "outcome refused";
      const lines = refusalLines(r);
      if (r.data.order_id) lines.push(el("div", { class: "muted" }, "order " + r.data.order_id));
      out.replaceChildren(...lines);
    }
    pollProduct();
  }

  // refusalLines says a refused purchase or reservation: its code, which
  // the browser tests read, its status and what to do.
  function refusalLines(r) {
    return [
      el("div", {}, "Refused: ", el("code", { id: "buy-code" }, r.data.code), " (HTTP " + r.status + ")"),
      el("div", {}, r.data.error),
    ];
  }

  // reserve reserves the watched product for the buyer, before its opening:
  // the answer says the reservation is stored and how many there are.
  async function reserve() {
    const out = $("#buy-result");
    const lab = labWatched();
    const user = Number($("#user-id").value);
    if (!buyerReady(out, lab, user)) return;
    const btn = $("#reserve");
    btn.disabled = state.reserving = true;
    const r = await api("POST", "/api/products/" + state.productID + "/reservation", lab ? { user_id: user } : undefined,
      lab ? undefined : AS_BUYER);
    state.reserving = false;
    tickSaleWindow();
    forgetExpired(r);
    if (r.ok) {
      out.className = "outcome";
      out.replaceChildren(el("div", { id: "reserved" }, "Reserved: buy at the opening. ",
        el("span", { class: "muted" }, "(" + fmt(r.data.reservations) + " reserved so far)")));
      $("#reservations").textContent = fmt(r.data.reservations) + " reserved";
    } else {
      out.className = "outcome refused";
      out.replaceChildren(...refusalLines(r));
    }
  }

  // ---- The orders bought from this page ----------------------------------

  const MAX_ORDERS = 5; // earlier orders kept in the list, beside the latest

  // orderView shows an order: its id, its state, the countdown of an unpaid
  // one with a payment window, and Pay and Cancel while it is unpaid. The
  // latest purchase's carries the ids the browser test reads.
  function orderView(o, latest) {
    const id = (name) => (latest ? { id: name } : {});
    const stateText = o.status + (o.status === "cancelled" && o.cancelled_by ? " by " + (o.cancelled_by === "timeout" ? "the payment window's end" : "the buyer") + ", unit returned" : "") +
      (o.reason ? ": " + o.reason : "");
    const nodes = [
      el("div", {}, "Order ", el("code", { class: "order-id", ...id("order-id") }, o.id), " · ",
        el("span", { class: "order-state " + o.status, ...id("order-status") }, stateText)),
      el("div", { class: "muted" }, "user " + o.user_id + " · product " + o.product_id + " · shard " + o.shard + " · mode " + o.mode),
    ];
    if (o.status === "unpaid") {
      const actions = el("div", { class: "order-actions" });
      if (o.due_at) actions.append(el("span", { class: "countdown", "data-due": o.due_at, ...id("order-countdown") }, countdown(o.due_at)));
      const pay = el("button", { type: "button", ...id("pay") }, "Pay");
      const cancel = el("button", { type: "button", class: "secondary", ...id("cancel") }, "Cancel");
      pay.addEventListener("click", () => changeOrder(o, "pay"));
      cancel.addEventListener("click", () => changeOrder(o, "cancel"));
      actions.append(pay, cancel);
      nodes.push(actions);
    }
    if (o.note) nodes.push(el("div", { class: "muted", ...id("order-note") }, o.note));
    return nodes;
  }

  function renderOrders() {
    const out = $("#buy-result");
    if (state.latest) {
      out.className = "outcome ok";
      out.replaceChildren(...orderView(state.latest, true));
    }
    $("#orders-wrap").hidden = state.orders.length === 0;
    $("#orders").replaceChildren(...state.orders.map((o) => el("li", {}, ...orderView(o, false))));
  }

  // countdown says how long an unpaid order may still be paid.
  function countdown(due) {
    const left = Math.ceil((Date.parse(due) - Date.now()) / 1000);
    if (left <= 0) return "payment window ended";
    return "pay within " + Math.floor(left / 60) + ":" + String(left % 60).padStart(2, "0");
  }

  // tickCountdowns moves the countdowns on; an order whose window has ended
  // is read again, to show the timeout's cancel.
  function tickCountdowns() {
    for (const span of document.querySelectorAll("[data-due]")) span.textContent = countdown(span.dataset.due);
    const now = Date.now();
    for (const o of [state.latest, ...state.orders]) {
      if (o && o.status === "unpaid" && o.due_at && Date.parse(o.due_at) < now && !o.refreshing) refreshOrder(o);
    }
  }

  // replaceOrder puts a newer copy of an order where the old one was.
  function replaceOrder(fresh) {
    if (state.latest?.id === fresh.id) state.latest = fresh;
    state.orders = state.orders.map((o) => (o.id === fresh.id ? fresh : o));
    renderOrders();
  }

  // refreshOrder reads an order again, a second apart at most.
  async function refreshOrder(o) {
    o.refreshing = true;
    const r = await api("GET", "/api/orders/" + o.id, undefined, asOwner(o));
    setTimeout(() => { o.refreshing = false; }, 1000);
    if (r.ok && r.data.status !== o.status) {
      replaceOrder(r.data);
      pollProduct();
    }
  }

  async function changeOrder(o, action) {
    for (const b of document.querySelectorAll(".order-actions button")) b.disabled = true;
    const as = asOwner(o);
    const r = await api("POST", "/api/orders/" + o.id + "/" + action, as ? {} : { user_id: o.user_id }, as);
    forgetExpired(r);
    if (r.ok) {
      replaceOrder(r.data);
    } else {
      // The state it lost to (paid, cancelled by the window's end) is the order's now.
      const g = await api("GET", "/api/orders/" + o.id, undefined, as);
      const fresh = g.ok ? g.data : { ...o };
      fresh.note = action + " refused: " + r.data.code + ": " + r.data.error;
      replaceOrder(fresh);
    }
    pollProduct();
  }

  // followQueued reads a queued order until the consumer has written it (or
  // the database refused it), for a few seconds at most.
  async function followQueued(o) {
    for (let i = 0; i < 50; i++) {
      await new Promise((done) => setTimeout(done, 100));
      const r = await api("GET", "/api/orders/" + o.id, undefined, asOwner(o));
      if (r.ok && r.data.status !== "pending") {
        replaceOrder(r.data);
        return;
      }
    }
  }

  // ---- Locks and the explanation ---------------------------------------

  async function loadLocks() {
    const r = await api("GET", "/api/locks");
    const sel = $("#lab-lock");
    if (!r.ok) {
      setStatus($("#run-status"), "Could not list the lock strategies: " + r.data.error, true);
      return;
    }
    for (const l of r.data) {
      state.locks.set(l.name, l);
      sel.append(el("option", { value: l.name }, l.name));
    }
    sel.value = state.locks.has("none") ? "none" : sel.options[0]?.value;
    explain();
  }

  // explain shows what the registry says of the chosen strategy; fields the
  // API does not send yet stay hidden and the summary stands alone.
  function explain() {
    const l = state.locks.get($("#lab-lock").value);
    if (!l) return;
    $("#explain-name").textContent = l.name;
    $("#explain-summary").textContent = l.summary || "";
    const show = (row, ok) => { $(row).hidden = !ok; return ok; };
    if (show("#explain-fixes-row", !!l.fixes)) $("#explain-fixes").textContent = l.fixes;
    if (show("#explain-breaks-row", !!l.breaks)) $("#explain-breaks").textContent = l.breaks;
    const cmds = Array.isArray(l.commands) ? l.commands : null;
    if (show("#explain-commands-row", cmds !== null)) {
      const ol = $("#explain-commands");
      ol.classList.toggle("empty", cmds.length === 0);
      ol.replaceChildren(
        ...(cmds.length ? cmds.map((c) => el("li", {}, el("code", {}, c))) : [el("li", { class: "muted" }, "None: nothing is sent to Redis.")]),
      );
    }
    if (show("#explain-test-row", !!l.test)) $("#explain-test").textContent = "go test ./internal/lock -run '" + l.test + "'";
  }

  async function loadModes() {
    const r = await api("GET", "/api/modes");
    if (!r.ok) {
      setStatus($("#run-status"), "Could not list the sale modes: " + r.data.error, true);
      return;
    }
    // The menu is the service's table, as the locks' is: a new mode is a
    // row there, not a line here.
    const sel = $("#lab-mode");
    for (const m of r.data) {
      state.modes.set(m.name, m);
      sel.append(el("option", { value: m.name }, m.short ? `${m.name} (${m.short})` : m.name));
    }
    sel.value = sel.options[0]?.value;
    showModeNote();
    explainMode();
  }

  // explainMode shows the modes table's entry for the chosen mode, as
  // explain does the lock's.
  function explainMode() {
    const m = state.modes.get($("#lab-mode").value);
    if (!m) return;
    $("#explain-mode-name").textContent = m.name;
    $("#explain-mode-summary").textContent = m.summary || "";
    const show = (row, ok) => { $(row).hidden = !ok; return ok; };
    if (show("#explain-mode-promises-row", !!m.promises)) $("#explain-mode-promises").textContent = m.promises;
    if (show("#explain-mode-breaks-row", !!m.breaks)) $("#explain-mode-breaks").textContent = m.breaks;
    if (show("#explain-mode-test-row", !!m.test)) $("#explain-mode-test").textContent = m.test;
  }

  // ---- Lab runs ----------------------------------------------------------

  const PRESETS = {
    oversell: { lock: "none", mode: "rmw", shards: 5, stock: 50, buyers: 300, concurrency: 64, hold_ms: 2, fault: "none" },
    token: { lock: "token", mode: "rmw", shards: 5, stock: 50, buyers: 300, concurrency: 64, hold_ms: 2, fault: "none" },
    lua: { lock: "none", mode: "lua", shards: 5, stock: 50, buyers: 300, concurrency: 64, hold_ms: 0, fault: "none" },
    unlock: { lock: "token", mode: "sqlrmw", shards: 5, stock: 20, buyers: 100, concurrency: 20, hold_ms: 5, fault: "release_before_commit" },
    async: { lock: "none", mode: "async", shards: 5, stock: 50, buyers: 300, concurrency: 64, hold_ms: 0, fault: "none" },
  };

  function applyPreset(name) {
    fillForm(PRESETS[name]);
  }

  // fillForm sets the lab's form to a preset: a PRESETS entry, or a
  // lesson's from course.json (the same names as POST /api/runs).
  function fillForm(p) {
    $("#lab-fault-requests").value = "1";
    for (const [k, v] of Object.entries(p)) {
      const input = $("#run-form").elements[k];
      if (input) input.value = String(v);
    }
    faultChanged();
    showModeNote();
    explain();
    explainMode();
  }

  function faultChanged() {
    $("#fault-requests-field").hidden = $("#lab-fault").value === "none";
  }

  function readSpec() {
    const f = $("#run-form").elements;
    const int = (name) => Number(f[name].value || 0);
    const spec = {
      lock: f.lock.value, mode: f.mode.value, shards: int("shards"), stock: int("stock"), buyers: int("buyers"),
      concurrency: int("concurrency"), hold_ms: int("hold_ms"), fault: f.fault.value, seat: seat(),
    };
    if (spec.fault !== "none") spec.fault_requests = int("fault_requests");
    const student = studentName();
    if (student) spec.student = student;
    return spec;
  }

  // ---- Class: one lab, many browsers --------------------------------------

  // SEAT_KEY keeps this browser's seat: a random label its runs and course
  // answers carry, so that it lists its own runs and the teacher sees who
  // answered what. Not a credential: runs are anyone's to read.
  const SEAT_KEY = "seckill.seat";
  const STUDENT_KEY = "seckill.student";

  function seat() {
    if (state.seat) return state.seat;
    let s = "";
    try {
      s = localStorage.getItem(SEAT_KEY) || "";
    } catch {
      // no storage: a seat for this page's life
    }
    if (!/^[A-Za-z0-9-]{1,64}$/.test(s)) {
      // getRandomValues, not randomUUID: a class reaches the teacher's
      // machine over plain http, which is not a secure context.
      s = Array.from(crypto.getRandomValues(new Uint8Array(12)), (b) => b.toString(16).padStart(2, "0")).join("");
      try {
        localStorage.setItem(SEAT_KEY, s);
      } catch {
        // kept for this page's life only
      }
    }
    state.seat = s;
    return s;
  }

  function studentName() {
    return $("#lab-student").value.trim().slice(0, 40);
  }

  // wholeClass: the runs table shows everyone's runs, the teacher's view.
  const wholeClass = () => $("#runs-class").checked;

  function classChanged() {
    try {
      localStorage.setItem(STUDENT_KEY, studentName());
    } catch {
      // not kept
    }
  }

  // sendAnswer tells the class (the teacher's view) what this seat
  // predicted in lesson l and what it showed. Best effort: without the
  // class token the lesson still works, only the teacher does not see
  // it, which the lesson's status line says.
  async function sendAnswer(l, o) {
    let predictions;
    if (l.predictions && l.predictions.length) {
      const made = typeof o.prediction === "object" ? o.prediction : {};
      predictions = l.predictions.filter((p) => made[p.lock]).map((p) => {
        const answers = p.answer.split("|");
        return { lock: p.lock, predicted: made[p.lock], outcome: answers.length === 1 ? answers[0] : "", held: answers.includes(made[p.lock]) };
      });
    } else {
      // A lesson whose answer is several ("exactly|fewer") has no one outcome.
      const answers = (o.outcome || "").split("|");
      predictions = [{ predicted: o.prediction, outcome: answers.length === 1 ? answers[0] : "", held: answers.includes(o.prediction) }];
    }
    const body = { seat: seat(), lesson: l.id, predictions };
    if (studentName()) body.student = studentName();
    if (o.run) body.run = o.run;
    const r = await api("POST", "/api/class/answers", body, true);
    // Said, not shouted: a student working alone needs no teacher's view.
    if (!r.ok && currentLesson() === l) {
      setStatus($("#lesson-status"), "The class's view did not get this answer: " +
        (r.status === 401 ? "it needs the class token (or the operator's), typed at the top." : r.data.code + ": " + r.data.error));
    }
  }

  async function loadClassAnswers() {
    const status = $("#class-answers-status");
    const r = await api("GET", "/api/class/answers", undefined, true);
    if (!r.ok) {
      setStatus(status, refusal(r, OPERATOR_HINT), true);
      return;
    }
    setStatus(status, r.data.length ? "" : "No answers yet: they come as the class's lessons show their outcomes.");
    const title = (id) => lessonByID(id)?.title || id;
    $("#class-answers").hidden = r.data.length === 0;
    $("#class-answers-body").replaceChildren(...r.data.map((l) => el("tr", {},
      el("td", {}, title(l.lesson)), el("td", { class: "num" }, fmt(l.seats)), el("td", { class: "num" }, fmt(l.held)),
      el("td", {}, l.predicted.map((p) => (p.lock ? p.lock + ": " : "") + p.predicted + " " + p.seats + " (" + p.held + ")").join(", ")),
      el("td", {}, l.answers.map((a) => (a.student || "seat " + a.seat.slice(0, 6)) + (a.held ? " ✓" : " ✗")).join(", ")))));
  }

  async function startRun(ev) {
    ev.preventDefault();
    const status = $("#run-status");
    const btn = $("#run");
    btn.disabled = true;
    setStatus(status, "Starting…");
    const r = await api("POST", "/api/runs", readSpec(), true);
    if (!r.ok) {
      btn.disabled = false;
      setStatus(status, refusal(r), true);
      return null;
    }
    follow(r.data);
    return r.data;
  }

  // follow shows a run going and polls it to its end: one just started, or
  // one the page found going when it loaded.
  function follow(run) {
    setStatus($("#run-status"), runStatusText(run));
    $("#run").disabled = true;
    $("#run-result").replaceChildren();
    $("#timeline-section").hidden = true;
    $("#run-progress").hidden = false;
    showProgress(run.progress);
    // Watch the lab's product so that its shard bars drain while the run goes.
    state.labProduct = run.product_id;
    $("#lab-product").textContent = String(state.labProduct);
    if (state.productID !== run.product_id) watch(run.product_id);
    else pollProduct(); // at once: until this run's reset, it may have answered 404
    state.running = run.id;
    pollRun(run.id);
  }

  function showProgress(p) {
    const bar = $("#progress");
    bar.max = Math.max(p.total, 1);
    bar.value = p.done;
    $("#progress-text").textContent = fmt(p.done) + " / " + fmt(p.total) + " requests";
  }

  async function pollRun(id) {
    // As its seat, which reads it whole: its student's name goes with it.
    const r = await api("GET", "/api/runs/" + encodeURIComponent(id) + "?seat=" + encodeURIComponent(seat()), undefined, true);
    if (!r.ok) {
      finishRun();
      setStatus($("#run-status"), "Lost track of run " + id + ": " + r.data.error, true);
      return;
    }
    showProgress(r.data.progress);
    if (r.data.status === "running" || r.data.status === "queued") {
      setStatus($("#run-status"), runStatusText(r.data));
      setTimeout(() => pollRun(id), RUN_MS);
      return;
    }
    finishRun();
    pollProduct(); // the run's final stock, now rather than at the next beat
    const run = r.data;
    setStatus($("#run-status"), "Run " + run.id + " " + run.status + ".", run.status === "failed");
    addRun(run);
    await showRun(run);
    lessonRunFinished(run);
  }

  // runStatusText says where a run going stands: queued at its place, or
  // running.
  function runStatusText(run) {
    if (run.status === "queued") {
      return "Run " + run.id + " waits its turn: place " + run.place + " in the queue (the lab runs one run at a time).";
    }
    return "Run " + run.id + " is going.";
  }

  // showRun shows a finished run's result and its race timeline.
  async function showRun(run) {
    $("#run-result").replaceChildren(...resultView(run));
    const section = $("#timeline-section");
    if (!run.result || run.result.verdict === "SKIPPED") {
      section.hidden = true;
      return;
    }
    // Pending until its answer; a run shown meanwhile wins over it.
    state.timeline = { run: run.id, data: null };
    section.hidden = true;
    const r = await api("GET", "/api/runs/" + encodeURIComponent(run.id) + "/timeline");
    if (state.timeline.run !== run.id) return;
    if (!r.ok) return;
    state.timeline.data = r.data;
    $("#timeline-run").textContent = run.id + " · " + run.result.strategy + " · " + run.result.mode;
    section.hidden = false;
    if (window.SeckillTimeline) SeckillTimeline.draw($("#timeline"), r.data);
  }

  function finishRun() {
    state.running = null;
    $("#run").disabled = false;
    $("#run-progress").hidden = true;
  }

  function resultView(run) {
    const nodes = [];
    const row = run.result;
    const s = run.spec;
    const head = el("div", { class: "result-head" },
      badge(row ? row.verdict : "FAILED", true),
      el("span", { class: "what" }, "Run " + run.id + ": " + s.lock + " · " + s.mode + " · " + s.shards + " shards · stock " +
        fmt(s.stock) + " · " + fmt(s.buyers) + " buyers · concurrency " + s.concurrency + " · hold " + s.hold_ms + " ms" +
        (s.fault !== "none" ? " · fault " + s.fault : "")));
    nodes.push(head);
    if (run.error) nodes.push(el("p", { class: "error-text" }, run.error));
    if (!row) return nodes;
    head.append(el("span", { class: "muted" }, verdictMeaning(row.verdict)));
    // A skipped run sent nothing: its counts are zeros, not measurements, and
    // its note is the error already shown.
    if (row.verdict === "SKIPPED") return nodes;
    const cells = [
      ["Sold (audit)", fmt(row.sold) + " / " + fmt(row.stock)],
      ["Oversold", fmt(row.oversold)],
      ["Lost updates", fmt(row.lost_updates)],
      ["Undersold", fmt(row.undersold)],
      ["201 created", fmt(row.ok)],
      ["Sold out", fmt(row.sold_out)],
      ["Errors", fmt(row.errors)],
      ["Requests/s", fmt(row.rps)],
      ["p50 ms", fmt(row.p50_ms, 1)],
      ["p99 ms", fmt(row.p99_ms, 1)],
      ["max ms", fmt(row.max_ms, 1)],
      ["Lock wait p99 ms", fmt(row.lock_wait_p99_ms, 1)],
    ];
    nodes.push(el("dl", { class: "result-grid", id: "result-grid" },
      ...cells.map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, v)))));
    const notes = [];
    if (!row.audit_verdict) notes.push("No audit from the database: the verdict rests on the harness's counts alone.");
    else if (row.agree) notes.push("The harness's counts and the database's audit agree.");
    else notes.push("The harness and the audit disagree:", ...(row.disagreements || []));
    if (row.error_codes) notes.push("Errors by code: " + Object.entries(row.error_codes).map(([c, n]) => c + " × " + n).join(", "));
    for (const e of row.error_samples || []) notes.push("e.g. " + e);
    if (row.note && !(run.error || "").includes(row.note)) notes.push(row.note);
    nodes.push(el("ul", { class: "result-notes" }, ...notes.map((n) => el("li", {}, n))));
    return nodes;
  }

  function verdictMeaning(v) {
    switch (v) {
      case "SAFE": return "every unit sold at most once, none lost, no error";
      case "OVERSOLD": return "more orders than stock, or decrements lost";
      case "UNDERSOLD": return "buyers were told sold out while stock was left";
      case "LOST": return "units left the store and reached no order";
      case "ERRORS": return "stock is right, but some requests failed";
      case "SKIPPED": return "no load was sent: the run could not start";
      default: return "";
    }
  }

  // ---- Comparison ----------------------------------------------------------

  const COLORS = { rps: "#2563eb", p99: "#7c3aed", oversold: "#dc2626" };
  const reduceMotion = matchMedia("(prefers-reduced-motion: reduce)").matches;

  function makeChart(canvas, label, color) {
    if (typeof Chart === "undefined") return null;
    return new Chart(canvas, {
      type: "bar",
      data: { labels: [], datasets: [{ label, data: [], backgroundColor: color, borderRadius: 3, maxBarThickness: 36 }] },
      options: {
        // Bars lie along x and runs stack down y, newest on top as in the
        // table: every run's label reads level at any width, and the chart
        // grows a row per run (the CSS's --runs) instead of skipping labels.
        indexAxis: "y",
        responsive: true,
        maintainAspectRatio: false,
        animation: reduceMotion ? false : { duration: 250 },
        plugins: {
          legend: { display: false },
          tooltip: { callbacks: { afterLabel: (c) => runDetail(state.runs[c.dataIndex]) } },
        },
        scales: {
          x: { beginAtZero: true, ticks: { precision: 0, maxRotation: 0 } },
          y: { reverse: true, ticks: { autoSkip: false } },
        },
      },
    });
  }

  function addRun(run) {
    if (!run.result || run.result.verdict === "SKIPPED") return;
    if (state.runs.some((r) => r.id === run.id)) return;
    state.runs.push(run);
    renderComparison();
  }

  function renderComparison() {
    const runs = state.runs;
    $("#charts-empty").hidden = runs.length > 0;
    $("#charts").hidden = runs.length === 0;
    $("#runs-table-wrap").hidden = runs.length === 0;
    $("#charts").style.setProperty("--runs", String(runs.length));
    const labels = runs.map((r) => "#" + r.id + " " + r.result.strategy + " · " + r.result.mode);
    const series = {
      throughput: runs.map((r) => Math.round(r.result.rps)),
      p99: runs.map((r) => Number(r.result.p99_ms.toFixed(1))),
      oversold: runs.map((r) => r.result.oversold),
    };
    for (const [name, chart] of Object.entries(state.charts)) {
      if (!chart) continue;
      chart.data.labels = labels;
      chart.data.datasets[0].data = series[name];
      chart.update();
      chart.canvas.setAttribute("aria-label", chart.data.datasets[0].label + ": " +
        runs.map((r, i) => "run " + r.id + " " + r.result.strategy + " " + series[name][i]).join(", "));
    }
    $("#runs-body").replaceChildren(...runs.slice().reverse().map((r) => {
      const x = r.result;
      const fault = r.spec.fault !== "none" ? el("span", { class: "muted" }, " + " + r.spec.fault) : "";
      const open = el("button", { type: "button", class: "chip run-open", "aria-label": "Show run " + r.id + " and its race timeline" }, r.id);
      open.addEventListener("click", () => {
        showRun(r);
        $("#run-result").scrollIntoView({ block: "start", behavior: reduceMotion ? "auto" : "smooth" });
      });
      const who = wholeClass() ? el("span", { class: "muted" }, " " + (r.spec.student || (r.spec.seat ? "seat " + r.spec.seat.slice(0, 6) : "another seat"))) : "";
      return el("tr", {},
        el("td", {}, open, who), el("td", {}, badge(x.verdict)), el("td", {}, x.strategy, fault), el("td", {}, x.mode),
        el("td", { class: "num" }, r.spec.shards),
        el("td", { class: "num" }, fmt(x.stock)), el("td", { class: "num" }, fmt(x.sold)),
        el("td", { class: "num" }, fmt(x.oversold)), el("td", { class: "num" }, fmt(x.lost_updates)),
        el("td", { class: "num" }, fmt(x.rps)), el("td", { class: "num" }, fmt(x.p99_ms, 1)));
    }));
  }

  // runDetail is a run's verdict and the settings its label leaves out.
  function runDetail(run) {
    if (!run) return "";
    const s = run.spec;
    return [run.result.verdict, s.shards + " shards, stock " + fmt(s.stock) + ", " + fmt(s.buyers) + " buyers",
      "concurrency " + s.concurrency + ", hold " + s.hold_ms + " ms" + (s.fault !== "none" ? ", fault " + s.fault : "")];
  }

  // loadRuns fills the comparison with the finished runs and follows the
  // run going, if any: a page reloaded mid-run picks it up.
  async function loadRuns() {
    // This seat's runs (and the seatless: a script's), which it follows;
    // the whole class's on asking, with their students' names when a token
    // is typed.
    const mine = await api("GET", "/api/runs?seat=" + encodeURIComponent(seat()), undefined, true);
    const r = wholeClass() ? await api("GET", "/api/runs", undefined, true) : mine;
    if (!r.ok) return; // a service without the lab: the section stays empty
    state.runs = [];
    $("#runs-whose").textContent = wholeClass() ? "(the whole class's runs)" : "(this browser's runs)";
    for (const run of r.data) addRun(run);
    renderComparison();
    if (r.data.length) {
      state.labProduct = r.data[r.data.length - 1].product_id;
      $("#lab-product").textContent = String(state.labProduct);
      productOptions();
    }
    // Followed: this seat's run going, or a seatless one; never another
    // student's, which would hold this browser's lab.
    const going = mine.ok && mine.data.find((run) => run.status === "running" || run.status === "queued");
    if (going && !state.running) follow(going);
  }

  // ---- Course --------------------------------------------------------------

  // COURSE_KEY is where this browser keeps its course: the lesson open and,
  // per lesson done, the prediction and what the run showed.
  const COURSE_KEY = "seckill.course";
  const ANSWER_TEXT = { more: "more than the stock", exactly: "exactly the stock", fewer: "fewer than the stock" };

  function courseProgress() {
    try {
      const p = JSON.parse(localStorage.getItem(COURSE_KEY) || "{}");
      return { current: p.current || "", done: p.done || {} };
    } catch {
      return { current: "", done: {} };
    }
  }

  function saveCourse(p) {
    try {
      localStorage.setItem(COURSE_KEY, JSON.stringify(p));
    } catch {
      // Storage refused: the course still works, without memory.
    }
  }

  async function loadCourse() {
    let res;
    try {
      res = await fetch("course.json");
      state.course = await res.json();
    } catch (e) {
      $("#course-progress").textContent = "The course did not load: " + e.message;
      return;
    }
    const p = courseProgress();
    const lessons = state.course.lessons;
    openLesson(lessons.some((l) => l.id === p.current) ? p.current : lessons[0].id);
  }

  function renderCourseList() {
    const p = courseProgress();
    const lessons = state.course.lessons;
    $("#course-list").replaceChildren(...lessons.map((l, i) => {
      const done = p.done[l.id];
      const b = el("button", { type: "button", class: "lesson-link", "data-lesson": l.id }, (i + 1) + ". " + l.title);
      if (l.id === p.current) b.setAttribute("aria-current", "step");
      b.addEventListener("click", () => openLesson(l.id));
      const li = el("li", { class: done ? "done" : "" }, b);
      if (done) li.append(el("span", { class: "muted", title: "done" }, " ✓"));
      return li;
    }));
    const n = lessons.filter((l) => p.done[l.id]).length;
    $("#course-progress").textContent = n + " of " + lessons.length + " done";
  }

  function lessonByID(id) {
    return state.course.lessons.find((l) => l.id === id);
  }

  function openLesson(id) {
    const l = lessonByID(id);
    const i = state.course.lessons.indexOf(l);
    const p = courseProgress();
    p.current = id;
    saveCourse(p);
    $("#lesson").hidden = false;
    $("#lesson").dataset.lesson = id;
    $("#lesson-number").textContent = (i + 1) + ".";
    $("#lesson-title").textContent = l.title;
    // The source article only: the failure's name would give the answer away.
    $("#lesson-seed").textContent = "From " + cite(state.course.sources[l.seed]) + " (docs/COURSE.md, lesson " + (i + 1) + ").";
    $("#lesson-question").textContent = l.question;
    $("#lesson-command").textContent = l.command;
    $("#lesson-needs").textContent = l.needs ? "(needs " + l.needs + ")" : "";
    const pr = l.preset;
    $("#lesson-preset").textContent = pr
      ? "In the lab: lock " + pr.lock + ", mode " + pr.mode + ", " + pr.shards + " shard(s), stock " + pr.stock + ", " +
        pr.buyers + " buyers, hold " + pr.hold_ms + " ms" + (pr.fault !== "none" ? ", fault " + pr.fault : "") + "."
      : "The lab's one instance cannot show this one: run the command in a terminal, then see what it does.";
    $("#lesson-load").hidden = !pr;
    $("#lesson-run").hidden = !pr;
    $("#lesson-reveal").hidden = !!pr;
    renderPredictions(l);
    const done = p.done[id];
    if (done && done.prediction) {
      const made = typeof done.prediction === "string" ? { "": done.prediction } : done.prediction;
      for (const [lock, guess] of Object.entries(made)) {
        const r = document.querySelector('input[name="' + predictionName(lock) + '"][value="' + guess + '"]');
        if (r) r.checked = true;
      }
    }
    setStatus($("#lesson-status"), "");
    if (done) showOutcome(l, done);
    else $("#lesson-outcome").hidden = true;
    renderCourseList();
  }

  // cite names a source article as web.Source's Cite does: by its title
  // and author, or what it is when our copy names no author.
  function cite(src) {
    if (!src) return "a source article";
    return "“" + src.title + "”" + (src.author ? " by " + src.author : " (" + src.where + "; no author named)");
  }

  // predictionName is the radio group of a lock's prediction; "" is the
  // lesson's one prediction.
  function predictionName(lock) {
    return lock ? "prediction-" + lock : "prediction";
  }

  // renderPredictions shows the lesson's one prediction, or a group per
  // lock when the lesson compares locks.
  function renderPredictions(l) {
    const per = l.predictions || [];
    for (const r of document.querySelectorAll('input[name="prediction"]')) r.checked = false;
    $("#lesson-prediction").hidden = per.length > 0;
    $("#lesson-predictions").hidden = per.length === 0;
    $("#lesson-predictions").replaceChildren(...per.map((p) => el("fieldset", { class: "prediction", "data-lock": p.lock },
      el("legend", {}, p.lock + ": units sold"),
      ...Object.entries(ANSWER_TEXT).map(([value, text]) =>
        el("label", {}, el("input", { type: "radio", name: predictionName(p.lock), value }), " " + text)))));
  }

  // prediction is the lesson's prediction, or {lock: prediction} for a
  // lesson that compares locks; "" until every one is made.
  function prediction() {
    const pick = (lock) => document.querySelector('input[name="' + predictionName(lock) + '"]:checked')?.value || "";
    const l = currentLesson();
    if (!(l.predictions && l.predictions.length)) return pick("");
    const made = Object.fromEntries(l.predictions.map((p) => [p.lock, pick(p.lock)]));
    return Object.values(made).every(Boolean) ? made : "";
  }

  function currentLesson() {
    return lessonByID($("#lesson").dataset.lesson);
  }

  async function runLesson() {
    const l = currentLesson();
    const guess = prediction();
    if (!guess) {
      setStatus($("#lesson-status"), "Predict first: more, exactly or fewer?", true);
      return;
    }
    fillForm(l.preset);
    setStatus($("#lesson-status"), "Running in the lab below…");
    const run = await startRun({ preventDefault() {} });
    if (!run) {
      setStatus($("#lesson-status"), "The lab refused the run: " + $("#run-status").textContent, true);
      return;
    }
    state.lessonRun = { run: run.id, lesson: l.id, prediction: guess };
  }

  // soldOutcome says how a run's sales compare with its stock, in the
  // prediction's words: more (oversold), exactly, or fewer.
  function soldOutcome(row) {
    if (row.verdict === "OVERSOLD" || row.oversold > 0) return "more";
    if (row.sold < Math.min(row.stock, row.requests || row.buyers || row.stock)) return "fewer";
    return "exactly";
  }

  function lessonRunFinished(run) {
    const pending = state.lessonRun;
    if (!pending || pending.run !== run.id) return;
    state.lessonRun = null;
    const l = lessonByID(pending.lesson);
    const row = run.result;
    if (!row || row.verdict === "SKIPPED") {
      setStatus($("#lesson-status"), "The run did not happen: " + (run.error || (row && row.note) || run.status) +
        (l.needs ? " (this lesson needs " + l.needs + ")" : ""), true);
      return;
    }
    // The race timeline's sentence, when showRun drew this run's.
    const drawn = state.timeline && state.timeline.run === run.id && state.timeline.data;
    const sentence = drawn ? $("#timeline .tl-sentence")?.textContent || "" : "";
    const outcome = { prediction: pending.prediction, outcome: soldOutcome(row), verdict: row.verdict, run: run.id, race: sentence };
    const p = courseProgress();
    p.done[l.id] = outcome;
    saveCourse(p);
    sendAnswer(l, outcome);
    setStatus($("#lesson-status"), "");
    if (currentLesson() === l) showOutcome(l, outcome);
    renderCourseList();
  }

  function revealLesson() {
    const l = currentLesson();
    const guess = prediction();
    if (!guess) {
      setStatus($("#lesson-status"), "Predict first: more, exactly or fewer?", true);
      return;
    }
    // A lesson checked across its runs is random run by run: its answer
    // holds for at least one of them, and the page says so.
    const random = !!(l.across && l.across.length);
    const verdict = (l.verdicts || []).map((v) => v.replaceAll("|", " or ")).join("; ");
    const outcome = { prediction: guess, outcome: l.answer || "", verdict, random };
    const p = courseProgress();
    p.done[l.id] = outcome;
    saveCourse(p);
    sendAnswer(l, outcome);
    setStatus($("#lesson-status"), "");
    showOutcome(l, outcome);
    renderCourseList();
  }

  // lockOutcomes says, per lock of a lesson that compares locks, what it
  // sells against what was predicted, and whether every prediction held.
  function lockOutcomes(l, o) {
    const made = typeof o.prediction === "object" ? o.prediction : {};
    const each = l.predictions.map((p) => {
      const answers = p.answer.split("|");
      const held = answers.includes(made[p.lock]);
      return { held, text: p.lock + " sells " + answers.map((a) => ANSWER_TEXT[a]).join(" or ") +
        ", you predicted " + (ANSWER_TEXT[made[p.lock]] || "nothing") + (held ? " (held)" : " (did not hold)") };
    });
    return { held: each.every((e) => e.held), text: each.map((e) => e.text).join("; ") };
  }

  function showOutcome(l, o) {
    const random = o.random ? " (one run alone is random: " + l.across.join("; ") + ")" : "";
    let held, sentence;
    if (l.predictions && l.predictions.length) {
      const per = lockOutcomes(l, o);
      held = per.held;
      sentence = (o.random ? "In the worst of its runs, " : "") + per.text + "." + random;
    } else {
      held = o.prediction === o.outcome;
      const what = o.run ? "Run " + o.run + " sold " + ANSWER_TEXT[o.outcome]
        : "It sells " + ANSWER_TEXT[o.outcome] + (o.random ? " in at least one of its runs" + random : "");
      sentence = what + "; you predicted " + ANSWER_TEXT[o.prediction] + "." + (o.run ? " Its result and race timeline are in the lab below." : "");
    }
    $("#lesson-held").replaceChildren(
      ...(o.run ? [badge(o.verdict, true), " "] : o.verdict ? [el("code", {}, o.verdict), " "] : []),
      el("strong", { id: "lesson-verdict-held" }, held ? "Your prediction held." : "Your prediction did not hold."),
      " " + sentence);
    $("#lesson-held").classList.toggle("held", held);
    $("#lesson-race").hidden = !o.race;
    $("#lesson-race-text").textContent = o.race || "";
    $("#lesson-look").textContent = l.look;
    $("#lesson-why").textContent = l.failure + " " + l.why;
    $("#lesson-fix").textContent = l.fix;
    $("#lesson-test").textContent = l.test;
    $("#lesson-more-row").hidden = !(l.more && l.more.length);
    $("#lesson-more").replaceChildren(...(l.more || []).flatMap((m, i) => (i ? [", ", el("code", {}, m)] : [el("code", {}, m)])));
    const i = state.course.lessons.indexOf(l);
    $("#lesson-next").hidden = i === state.course.lessons.length - 1;
    $("#lesson-outcome").hidden = false;
  }

  function nextLesson() {
    const i = state.course.lessons.indexOf(currentLesson());
    const next = state.course.lessons[i + 1];
    if (next) openLesson(next.id);
    $("#course").scrollIntoView({ block: "start" });
  }

  // ---- Start -------------------------------------------------------------

  function start() {
    state.charts = {
      throughput: makeChart($("#chart-throughput"), "Throughput (req/s)", COLORS.rps),
      p99: makeChart($("#chart-p99"), "p99 latency (ms)", COLORS.p99),
      oversold: makeChart($("#chart-oversold"), "Oversold units", COLORS.oversold),
    };
    $("#user-id").value = String(1 + Math.floor(Math.random() * 999_999));
    // The token's form is there for the browser, which wants a password in
    // one; Enter in it must not reload the page.
    $("#token-form").addEventListener("submit", (e) => e.preventDefault());
    // The operator types the token once: this tab keeps it until it
    // closes (sessionStorage: not left on disk for the next user of the
    // browser, nor shared with every tab). Buying needs none; only
    // creating, resetting and lab runs send it.
    try {
      localStorage.removeItem(TOKEN_KEY); // where earlier versions kept it
      $("#token").value = sessionStorage.getItem(TOKEN_KEY) || "";
      $("#token").addEventListener("input", (e) => sessionStorage.setItem(TOKEN_KEY, e.target.value.trim()));
    } catch {
      // Storage refused (a private window's policy): the field still works.
    }
    $("#product-id").addEventListener("change", (e) => watch(Number(e.target.value)));
    $("#reset").addEventListener("click", askReset);
    $("#reset-confirm").addEventListener("submit", resetProduct);
    $("#reset-cancel").addEventListener("click", () => { $("#reset-confirm").hidden = true; });
    $("#buy-form").addEventListener("submit", buy);
    $("#reserve").addEventListener("click", reserve);
    $("#signin-form").addEventListener("submit", signIn);
    $("#signup").addEventListener("click", signUp);
    $("#signout").addEventListener("click", signOut);
    $("#passkey-add").addEventListener("click", addPasskey);
    $("#passkey-signin").addEventListener("click", passkeySignIn);
    $("#captcha-new").addEventListener("click", newCaptcha);
    $("#signup-captcha-new").addEventListener("click", newSignupCaptcha);
    showBuyer();
    $("#run-form").addEventListener("submit", startRun);
    $("#lab-lock").addEventListener("change", explain);
    $("#lab-fault").addEventListener("change", faultChanged);
    $("#lab-mode").addEventListener("change", showModeNote);
    $("#lab-mode").addEventListener("change", explainMode);
    for (const b of document.querySelectorAll("[data-preset]")) b.addEventListener("click", () => applyPreset(b.dataset.preset));
    $("#lesson-load").addEventListener("click", () => fillForm(currentLesson().preset));
    $("#lesson-run").addEventListener("click", runLesson);
    $("#lesson-reveal").addEventListener("click", revealLesson);
    $("#lesson-next").addEventListener("click", nextLesson);
    try {
      $("#lab-student").value = localStorage.getItem(STUDENT_KEY) || "";
    } catch {
      // nothing kept
    }
    $("#lab-student").addEventListener("change", classChanged);
    $("#runs-class").addEventListener("change", loadRuns);
    $("#class-answers-load").addEventListener("click", loadClassAnswers);
    setInterval(tickCountdowns, 250);
    setInterval(tickSaleWindow, 100);

    productOptions();
    loadAccountOptions();
    loadLocks();
    loadModes();
    loadRuns();
    loadCourse();
    pollProduct();
    setInterval(tick, PRODUCT_MS);
  }

  start();
})();
