// Passkeys on the review pages: register one (/keys), and approve or reject a task of
// a monitor with signed approvals by signing its statement (the WebAuthn challenge is the
// statement's). Every request carries the session's CSRF token in X-CSRF-Token.
"use strict";

function toBytes(text) {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
  const padded = base64 + "=".repeat((4 - (base64.length % 4)) % 4);
  return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
}

function toText(buffer) {
  let binary = "";
  new Uint8Array(buffer).forEach((b) => { binary += String.fromCharCode(b); });
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

async function send(path, csrf, body) {
  const answer = await fetch(path, {
    method: "POST", credentials: "same-origin",
    headers: {"content-type": "application/json", "x-csrf-token": csrf},
    body: JSON.stringify(body || {}),
  });
  const value = await answer.json();
  if (!answer.ok) {
    throw new Error(value.error + ": " + value.message);
  }
  return value;
}

function say(id, text) {
  const where = document.getElementById(id);
  if (where) { where.textContent = text; }
}

async function registerPasskey(button) {
  const csrf = button.dataset.csrf;
  const options = await send("/keys/options", csrf);
  options.challenge = toBytes(options.challenge);
  options.user.id = toBytes(options.user.id);
  options.excludeCredentials = (options.excludeCredentials || []).map(
    (c) => Object.assign({}, c, {id: toBytes(c.id)}));
  const made = await navigator.credentials.create({publicKey: options});
  const added = await send("/keys/register", csrf, {
    id: made.id, rawId: toText(made.rawId), type: made.type,
    response: {clientDataJSON: toText(made.response.clientDataJSON),
               attestationObject: toText(made.response.attestationObject)},
  });
  say("passkey-outcome", "passkey " + added.key_id + " added (" + added.fingerprint + ")");
  window.location.reload();
}

async function decideSigned(button, decision) {
  const csrf = button.dataset.csrf, key = button.dataset.key;
  const minted = await send("/tasks/" + key + "/statement", csrf, {decision: decision});
  const proof = await navigator.credentials.get({publicKey: {
    challenge: toBytes(minted.challenge), rpId: window.location.hostname,
    userVerification: "required", timeout: 60000,
    allowCredentials: minted.credentials.map((id) => ({type: "public-key", id: toBytes(id)})),
  }});
  const body = {
    digest: button.dataset.digest, statement: minted.statement,
    webauthn: {credential_id: toText(proof.rawId),
               authenticator_data: toText(proof.response.authenticatorData),
               client_data_json: toText(proof.response.clientDataJSON),
               signature: toText(proof.response.signature)},
  };
  if (decision === "reject") {
    body.reason = document.getElementById("reject-reason-input").value || null;
  } else {
    const ack = document.getElementById("ack-hidden");
    body.ack_hidden_characters = Boolean(ack && ack.checked);
  }
  await send("/tasks/" + key + "/" + decision + "-signed", csrf, body);
  window.location.reload();
}

function wire(id, action) {
  const button = document.getElementById(id);
  if (!button) { return; }
  button.addEventListener("click", () => {
    button.disabled = true;
    action(button).catch((error) => {
      say("passkey-outcome", String(error.message || error));
      button.disabled = false;
    });
  });
}

wire("add-passkey", registerPasskey);
wire("approve-signed", (button) => decideSigned(button, "approve"));
wire("reject-signed", (button) => decideSigned(button, "reject"));
