// A second real MCP client for Interlock: the official TypeScript SDK (the one most MCP hosts and the
// MCP Inspector are built on) over stdio and streamable HTTP, with Ajv compiling every declared schema.
//
// Usage: node client.mjs CONFIG.json  (written by test_node_client.py; see there for its fields)
//
// For every tool it lists, it calls the success path and the error paths and checks that each answer is
// a tool result — never a thrown protocol error — that carries the message and a machine-readable
// caller_action; that every successful result's structured content validates against the tool's
// output schema; and that no error result carries structured content (docs/adr/0012). Prints one line
// per failed check, then `node-client: N passed, M failed`; exits 1 if anything failed.

import { readFileSync } from "node:fs";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import Ajv from "ajv";
import Ajv2020 from "ajv/dist/2020.js";

const CALLER_ACTIONS = ["DONE", "RETRY_SAME_CALL", "WAIT_FOR_APPROVAL", "DO_NOT_RETRY", "ESCALATE_TO_OPERATOR"];
const TOOLS = ["fetch_payment", "fetch_refund", "create_refund", "create_instant_settlement", "create_payout", "interlock_status"];
const UNKNOWN_SIK = "NQZXK4TBMFXGKZLFMVSXEZLSMVZGK4TF";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
let passed = 0;
const failures = [];

function check(ok, what, detail) {
  if (ok) {
    passed += 1;
  } else {
    failures.push(`${what}${detail === undefined ? "" : `: ${JSON.stringify(detail)}`}`);
  }
  return ok;
}

// The TypeScript SDK 1.x validates with Ajv's default dialect (draft-07); MCP 2025-11-25 makes 2020-12 the
// default for a schema without $schema. Interlock's schemas must compile, and mean the same, under both.
const dialects = { "draft-07": new Ajv({ allErrors: true, strict: true }), "2020-12": new Ajv2020({ allErrors: true, strict: true }) };

function compile(label, schema) {
  const validators = [];
  for (const [dialect, ajv] of Object.entries(dialects)) {
    try {
      validators.push([dialect, ajv.compile(schema)]);
      passed += 1;
    } catch (error) {
      failures.push(`${label} does not compile as ${dialect}: ${error.message}`);
    }
  }
  return (value) => {
    const errors = [];
    for (const [dialect, validate] of validators) {
      if (!validate(value)) errors.push(`${dialect}: ${validate.errors.map((e) => `${e.instancePath} ${e.message}`).join("; ")}`);
    }
    return errors;
  };
}

function textBlocks(result) {
  return (result.content ?? []).filter((block) => block.type === "text").map((block) => block.text);
}

// The `{error, caller_action}` object an error result carries as a JSON text block.
function errorBody(result) {
  for (const text of textBlocks(result)) {
    try {
      const parsed = JSON.parse(text);
      if (parsed && typeof parsed === "object" && "error" in parsed && "caller_action" in parsed) return parsed;
    } catch {
      // the words, not the JSON
    }
  }
  return undefined;
}

async function call(client, transport, schemas, spec) {
  const label = `${transport} ${spec.name}`;
  const input = schemas[spec.tool]?.input;
  if (input && spec.schemaValid !== undefined) {
    const errors = input(spec.args);
    check((errors.length === 0) === spec.schemaValid, `${label}: the input schema ${spec.schemaValid ? "rejects" : "accepts"} the arguments`, errors);
  }
  let result;
  try {
    result = await client.callTool({ name: spec.tool, arguments: spec.args, ...(spec.meta ? { _meta: spec.meta } : {}) });
  } catch (error) {
    // What issue 16 was about: the SDK threw (e.g. -32602 "Structured content does not match the tool's
    // output schema") and the agent lost the message and the caller_action.
    check(false, `${label}: the client threw instead of returning a result`, String(error));
    return undefined;
  }
  if (spec.expect === "error") {
    check(result.isError === true, `${label}: isError`, result);
    check(result.structuredContent === undefined, `${label}: an error result carries no structured content`, result.structuredContent);
    const body = errorBody(result);
    if (!check(body !== undefined, `${label}: a JSON text block {error, caller_action}`, textBlocks(result))) return result;
    check(typeof body.error.message === "string" && body.error.message.length > 0, `${label}: the message`, body);
    check(CALLER_ACTIONS.includes(body.caller_action), `${label}: caller_action is one of ${CALLER_ACTIONS}`, body);
    const words = textBlocks(result)[0] ?? "";
    check(words.includes(body.error.message) && words.includes(body.caller_action), `${label}: the words say the message and caller_action`, words);
    for (const key of ["code", "field", "reason_code"]) {
      if (spec[key] !== undefined) check(body.error[key] === spec[key], `${label}: error.${key}`, body.error);
    }
    if (spec.caller_action !== undefined) check(body.caller_action === spec.caller_action, `${label}: caller_action`, body);
    if (spec.mentions !== undefined) check(body.error.message.includes(spec.mentions), `${label}: the message names ${spec.mentions}`, body.error.message);
    return result;
  }
  check(result.isError !== true, `${label}: not an error`, result);
  const structured = result.structuredContent;
  if (!check(structured !== undefined, `${label}: structured content`, result)) return result;
  check(schemas[spec.tool].output(structured).length === 0, `${label}: structured content validates against the output schema`, schemas[spec.tool].output(structured));
  const sameAsText = textBlocks(result).some((text) => {
    try {
      return isDeepEqual(JSON.parse(text), structured);
    } catch {
      return false;
    }
  });
  check(sameAsText, `${label}: the same JSON as text, for clients that read only text`, textBlocks(result));
  for (const key of ["state", "caller_action", "replayed", "reason_code", "id"]) {
    if (spec[key] !== undefined) check(structured[key] === spec[key], `${label}: ${key}`, structured);
  }
  if ("caller_action" in structured) check(CALLER_ACTIONS.includes(structured.caller_action), `${label}: caller_action is one of ${CALLER_ACTIONS}`, structured);
  return result;
}

function isDeepEqual(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((key) => isDeepEqual(a[key], b[key]));
}

// Every tool, its success path and its error paths, for one transport and its own payments.
function scenarios(fixtures) {
  const { refund_payment: pay, held_payment: held, settlement_amount: settle } = fixtures;
  const payout = { fund_account_id: fixtures.payee, amount: fixtures.payout_amount, currency: "INR", mode: "IMPS", purpose: "vendor bill" };
  return [
    // create_refund
    { name: "refund applied", tool: "create_refund", args: { payment_id: pay, amount: 1000 }, meta: { "interlock/operation_ref": fixtures.operation_ref }, schemaValid: true, expect: "result", state: "APPLIED", caller_action: "DONE", replayed: false },
    { name: "refund replayed", tool: "create_refund", args: { payment_id: pay, amount: 1000 }, schemaValid: true, expect: "result", state: "APPLIED", caller_action: "DONE", replayed: true },
    { name: "refund held", tool: "create_refund", args: { payment_id: held, amount: 400000 }, schemaValid: true, expect: "result", state: "HELD", caller_action: "WAIT_FOR_APPROVAL", replayed: false },
    { name: "refund blocked", tool: "create_refund", args: { payment_id: pay, amount: 4800000 }, schemaValid: true, expect: "result", state: "BLOCKED", caller_action: "DO_NOT_RETRY" },
    { name: "refund float amount", tool: "create_refund", args: { payment_id: pay, amount: 1899.5 }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "amount", caller_action: "DO_NOT_RETRY" },
    { name: "refund string amount", tool: "create_refund", args: { payment_id: pay, amount: "1899" }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "amount", caller_action: "DO_NOT_RETRY" },
    { name: "refund zero amount", tool: "create_refund", args: { payment_id: pay, amount: 0 }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "amount", caller_action: "DO_NOT_RETRY" },
    { name: "refund unknown field", tool: "create_refund", args: { payment_id: pay, amount: 100, currency: "USD" }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "currency", caller_action: "DO_NOT_RETRY" },
    { name: "refund missing payment_id", tool: "create_refund", args: { amount: 100 }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "payment_id", caller_action: "DO_NOT_RETRY" },
    { name: "refund bad operation_ref", tool: "create_refund", args: { payment_id: pay, amount: 100 }, meta: { "interlock/operation_ref": "not a ref!" }, schemaValid: true, expect: "error", code: "INVALID_INPUT", field: "operation_ref" },
    // create_instant_settlement
    { name: "settlement applied", tool: "create_instant_settlement", args: { amount: settle, description: "node client" }, schemaValid: true, expect: "result", state: "APPLIED", caller_action: "DONE", replayed: false },
    { name: "settlement replayed", tool: "create_instant_settlement", args: { amount: settle, description: "node client" }, schemaValid: true, expect: "result", state: "APPLIED", replayed: true },
    { name: "settlement blocked", tool: "create_instant_settlement", args: { amount: 9000000 }, schemaValid: true, expect: "result", state: "BLOCKED", caller_action: "DO_NOT_RETRY" },
    { name: "settlement float amount", tool: "create_instant_settlement", args: { amount: 500.25 }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "amount" },
    { name: "settlement string amount", tool: "create_instant_settlement", args: { amount: "50000" }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "amount" },
    { name: "settlement zero amount", tool: "create_instant_settlement", args: { amount: 0 }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "amount" },
    { name: "settlement unknown field", tool: "create_instant_settlement", args: { amount: 100, speed: "instant" }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "speed" },
    { name: "settlement amount and full balance", tool: "create_instant_settlement", args: { amount: 100, settle_full_balance: true }, expect: "error", code: "INVALID_INPUT", field: "amount" },
    { name: "settlement neither amount nor full balance", tool: "create_instant_settlement", args: {}, expect: "error", code: "INVALID_INPUT", caller_action: "DO_NOT_RETRY" },
    // create_payout (ADR 0028): the mandate's payee only, the mandate's account and queueing rule
    { name: "payout applied", tool: "create_payout", args: payout, schemaValid: true, expect: "result", state: "APPLIED", caller_action: "DONE", replayed: false },
    { name: "payout replayed with another narration", tool: "create_payout", args: { ...payout, narration: "second try" }, schemaValid: true, expect: "result", state: "APPLIED", replayed: true },
    { name: "payout to an unlisted payee", tool: "create_payout", args: { ...payout, fund_account_id: fixtures.stranger }, schemaValid: true, expect: "result", state: "BLOCKED", caller_action: "DO_NOT_RETRY", reason_code: "G2_PAYEE_NOT_ALLOWED" },
    { name: "payout float amount", tool: "create_payout", args: { ...payout, amount: 480.5 }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "amount", caller_action: "DO_NOT_RETRY" },
    { name: "payout missing fund_account_id", tool: "create_payout", args: { amount: 100, currency: "INR", mode: "IMPS", purpose: "payout" }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "fund_account_id" },
    { name: "payout unknown mode", tool: "create_payout", args: { ...payout, mode: "CARD" }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "mode" },
    { name: "payout queue flag from the agent", tool: "create_payout", args: { ...payout, queue_if_low_balance: true }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "queue_if_low_balance" },
    // fetch_payment / fetch_refund
    { name: "fetch_payment found", tool: "fetch_payment", args: { payment_id: pay }, schemaValid: true, expect: "result", id: pay },
    { name: "fetch_payment unknown id", tool: "fetch_payment", args: { payment_id: "pay_NOSUCHPAYMENT01" }, schemaValid: true, expect: "error", code: "NOT_FOUND", field: "payment_id", caller_action: "DO_NOT_RETRY" },
    { name: "fetch_payment missing payment_id", tool: "fetch_payment", args: {}, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "payment_id", caller_action: "DO_NOT_RETRY" },
    { name: "fetch_payment unknown field", tool: "fetch_payment", args: { payment_id: pay, expand: "card" }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "expand" },
    { name: "fetch_payment malformed id", tool: "fetch_payment", args: { payment_id: "pay 1; DROP" }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "payment_id" },
    { name: "fetch_refund unknown id", tool: "fetch_refund", args: { refund_id: "rfnd_NOSUCHREFUND01" }, schemaValid: true, expect: "error", code: "NOT_FOUND", field: "refund_id", caller_action: "DO_NOT_RETRY" },
    { name: "fetch_refund missing refund_id", tool: "fetch_refund", args: {}, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "refund_id" },
    // interlock_status
    { name: "status by operation_ref", tool: "interlock_status", args: { operation_ref: fixtures.operation_ref }, schemaValid: true, expect: "result", state: "APPLIED", caller_action: "DONE", replayed: true },
    { name: "status unknown sik", tool: "interlock_status", args: { sik: UNKNOWN_SIK }, schemaValid: true, expect: "result", state: "NOT_FOUND", caller_action: "RETRY_SAME_CALL" },
    { name: "status of neither", tool: "interlock_status", args: {}, expect: "error", code: "INVALID_INPUT", caller_action: "DO_NOT_RETRY" },
    { name: "status malformed sik", tool: "interlock_status", args: { sik: "lower-case" }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "sik" },
    { name: "status unknown field", tool: "interlock_status", args: { sik: UNKNOWN_SIK, merchant_id: "acc_OTHER00001" }, schemaValid: false, expect: "error", code: "INVALID_INPUT", field: "merchant_id" },
    // A tool nobody serves: still a result the agent can read, naming what is offered.
    { name: "unknown tool", tool: "create_payment_link", args: { amount: 100 }, expect: "error", code: "UNKNOWN_TOOL", caller_action: "DO_NOT_RETRY", mentions: "create_refund" },
  ];
}

async function connect(transport, spec) {
  const client = new Client({ name: "interlock-node-client-test", version: "1.0.0" });
  const channel = transport === "http"
    ? new StreamableHTTPClientTransport(new URL(spec.url), { requestInit: { headers: { Authorization: `Bearer ${spec.token}` } } })
    : new StdioClientTransport({ command: spec.command, args: spec.args, env: spec.env, cwd: spec.cwd, stderr: "inherit" });
  await client.connect(channel);
  return client;
}

async function listAndCompile(client, transport) {
  const { tools } = await client.listTools();
  check(JSON.stringify(tools.map((tool) => tool.name).sort()) === JSON.stringify([...TOOLS].sort()), `${transport} tools/list names`, tools.map((tool) => tool.name));
  const schemas = {};
  for (const tool of tools) {
    check(tool.inputSchema?.type === "object" && tool.outputSchema?.type === "object", `${transport} ${tool.name} declares input and output schemas`, tool);
    schemas[tool.name] = { input: compile(`${transport} ${tool.name} inputSchema`, tool.inputSchema), output: compile(`${transport} ${tool.name} outputSchema`, tool.outputSchema) };
  }
  return schemas;
}

async function exercise(transport, spec, fixtures) {
  const client = await connect(transport, spec);
  try {
    const schemas = await listAndCompile(client, transport);
    const answers = {};
    for (const scenario of scenarios(fixtures)) {
      answers[scenario.name] = await call(client, transport, schemas, scenario);
    }
    // fetch_refund's success path needs a refund: the one this transport just made.
    const refundId = answers["refund applied"]?.structuredContent?.rail_entity_id;
    if (check(typeof refundId === "string", `${transport} refund applied names its refund`, refundId)) {
      await call(client, transport, schemas, { name: "fetch_refund found", tool: "fetch_refund", args: { refund_id: refundId }, schemaValid: true, expect: "result", id: refundId });
    }
    const sik = answers["refund applied"]?.structuredContent?.sik;
    await call(client, transport, schemas, { name: "status by sik", tool: "interlock_status", args: { sik }, schemaValid: true, expect: "result", state: "APPLIED", replayed: true });
    return schemas;
  } finally {
    await client.close();
  }
}

async function sandboxFaults(sandbox, faults) {
  const response = await fetch(`${sandbox.url}/__sandbox/faults`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Basic ${Buffer.from(`${sandbox.key_id}:${sandbox.key_secret}`).toString("base64")}` },
    body: JSON.stringify({ faults }),
  });
  if (!response.ok) throw new Error(`sandbox faults: HTTP ${response.status}`);
}

// IN_PROGRESS: a slow rail and an ingress whose outcome deadline is shorter than the rail takes; then the
// same call again through the normal ingress, as caller_action RETRY_SAME_CALL says, gets the outcome.
async function inProgress(spec, fixtures, schemas, sandbox) {
  const args = { payment_id: fixtures.in_progress_payment, amount: 2000 };
  await sandboxFaults(sandbox, [{ name: "slow", rate: 1.0, params: { delay_ms: 800 } }]);
  try {
    const hurried = await connect("stdio", { ...spec, env: { ...spec.env, INTERLOCK_OUTCOME_WAIT_MS: "100" } });
    try {
      await hurried.listTools();
      await call(hurried, "stdio(100 ms deadline)", schemas, { name: "refund in progress", tool: "create_refund", args, expect: "result", state: "IN_PROGRESS", caller_action: "RETRY_SAME_CALL", replayed: false });
    } finally {
      await hurried.close();
    }
  } finally {
    await sandboxFaults(sandbox, []);
  }
  const patient = await connect("stdio", spec);
  try {
    await patient.listTools();
    let answer;
    for (let attempt = 0; attempt < 20; attempt += 1) {
      answer = (await patient.callTool({ name: "create_refund", arguments: args })).structuredContent;
      if (answer?.state !== "IN_PROGRESS") break;
    }
    check(answer?.state === "APPLIED" && answer?.replayed === true, "stdio the same call again answers the recorded outcome", answer);
  } finally {
    await patient.close();
  }
}

try {
  const schemas = await exercise("stdio", config.stdio, config.fixtures.stdio);
  await exercise("http", config.http, config.fixtures.http);
  await inProgress(config.stdio, config.fixtures.stdio, schemas, config.sandbox);
} catch (error) {
  check(false, "the harness ran to the end", String(error?.stack ?? error));
}
for (const failure of failures) console.log(`FAIL ${failure}`);
console.log(`node-client: ${passed} passed, ${failures.length} failed`);
process.exit(failures.length === 0 ? 0 : 1);
