-- The Interlock ledger (SPEC §5). Every table is STRICT: a float amount is refused by SQLite itself.
-- Opened with journal_mode=WAL and synchronous=FULL (ledger/db.py asserts both).

CREATE TABLE IF NOT EXISTS intents (
    merchant_id        TEXT    NOT NULL,
    sik                TEXT    NOT NULL,
    tool               TEXT    NOT NULL,
    subject_id         TEXT    NOT NULL,
    amount_minor       INTEGER NOT NULL CHECK (amount_minor > 0),
    currency           TEXT    NOT NULL CHECK (length(currency) = 3 AND currency = upper(currency)),
    params_hash        TEXT    NOT NULL,
    params_json        TEXT    NOT NULL,
    state              TEXT    NOT NULL,
    attempt_seq        INTEGER NOT NULL DEFAULT 0 CHECK (attempt_seq >= 0),
    reconcile_attempts INTEGER NOT NULL DEFAULT 0,
    lease_owner        TEXT,
    lease_epoch        INTEGER,
    lease_expires_at   INTEGER,
    rail_entity_id     TEXT,
    reason_code        TEXT,
    agent_id           TEXT    NOT NULL,
    mandate_id         TEXT    NOT NULL,
    mandate_hash       TEXT    NOT NULL,
    operation_ref      TEXT,
    distinct_reason    TEXT,
    hold_expires_at    INTEGER,
    authorized_at      INTEGER,             -- the last entry into AUTHORIZED: what G3 windows count by
    task_id            TEXT,                -- the harness-signed task this intent is bound to (SPEC §10)
    task_digest        TEXT,                -- sha256 of the task's canonical JSON, as signed
    task_ceiling_minor INTEGER,             -- the task's max_amount_minor for this tool: a cap on the sum under task_id
    task_signer        TEXT,                -- who signed the task: its ceiling counts per (task_signer, task_id)
    first_seen_at      INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    PRIMARY KEY (merchant_id, sik)          -- I1: at most one intent per (merchant_id, sik)
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS intents_by_state ON intents (state, updated_at);
CREATE INDEX IF NOT EXISTS intents_by_subject ON intents (merchant_id, subject_id, state);
-- A stamp names a SIK, not its merchant: a webhook's entity is matched to its intent by this (ledger/sightings.py).
CREATE INDEX IF NOT EXISTS intents_by_sik ON intents (sik);
-- G3 windows count an agent's intents by their last authorisation (ledger/queries.py window_usage), in the
-- gate and again inside the serial admission transaction: without this a window scans every intent.
CREATE INDEX IF NOT EXISTS intents_by_agent_window
    ON intents (merchant_id, agent_id, COALESCE(authorized_at, first_seen_at));

-- I4: APPLIED and BLOCKED are absorbing, even for raw SQL that bypasses transition().
CREATE TRIGGER IF NOT EXISTS intents_absorbing_states
BEFORE UPDATE OF state ON intents
WHEN OLD.state IN ('APPLIED', 'BLOCKED') AND NEW.state IS NOT OLD.state
BEGIN
    SELECT RAISE(ABORT, 'I4: APPLIED and BLOCKED are absorbing');
END;

-- I5: attempt_seq never goes backwards.
CREATE TRIGGER IF NOT EXISTS intents_attempt_seq_monotone
BEFORE UPDATE OF attempt_seq ON intents
WHEN NEW.attempt_seq < OLD.attempt_seq
BEGIN
    SELECT RAISE(ABORT, 'I5: attempt_seq must not decrease');
END;

CREATE TABLE IF NOT EXISTS intent_attempts (
    merchant_id    TEXT    NOT NULL,
    sik            TEXT    NOT NULL,
    attempt_seq    INTEGER NOT NULL CHECK (attempt_seq >= 1),
    lease_epoch    INTEGER NOT NULL,
    lease_expires_at INTEGER,               -- the IN_FLIGHT lease this attempt was sent under (ADR 0005)
    started_at     INTEGER NOT NULL,
    sent_at        INTEGER,                 -- when the request's first byte was allowed to leave (ADR 0010)
    finished_at    INTEGER,
    outcome        TEXT,
    rail_entity_id TEXT,
    http_status    INTEGER,
    fee_minor      INTEGER,
    tax_minor      INTEGER,
    error_code     TEXT,
    request_json   TEXT,
    response_json  TEXT,
    PRIMARY KEY (merchant_id, sik, attempt_seq),
    FOREIGN KEY (merchant_id, sik) REFERENCES intents (merchant_id, sik)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS decisions (
    request_id   TEXT    NOT NULL PRIMARY KEY,
    merchant_id  TEXT    NOT NULL,
    sik          TEXT    NOT NULL,
    agent_id     TEXT    NOT NULL,
    mandate_hash TEXT    NOT NULL,
    verdict      TEXT    NOT NULL CHECK (verdict IN ('ALLOW', 'HOLD', 'BLOCK')),
    reason_code  TEXT    NOT NULL,
    results_json TEXT    NOT NULL,
    decided_at   INTEGER NOT NULL,
    audit_seq    INTEGER,
    task_id      TEXT,
    task_digest  TEXT,
    task_signer  TEXT
) STRICT;

CREATE INDEX IF NOT EXISTS decisions_by_intent ON decisions (merchant_id, sik);

CREATE TABLE IF NOT EXISTS recon_findings (
    id                   INTEGER PRIMARY KEY,
    merchant_id          TEXT    NOT NULL,
    sik                  TEXT    NOT NULL,
    attempt_seq          INTEGER NOT NULL,
    outcome              TEXT    NOT NULL
        CHECK (outcome IN ('APPLIED', 'CONFIRMED_NOT_APPLIED', 'INCONCLUSIVE')),
    pages_scanned        INTEGER NOT NULL CHECK (pages_scanned >= 0),
    pagination_exhausted INTEGER NOT NULL CHECK (pagination_exhausted IN (0, 1)),
    matched_entity_id    TEXT,
    queried_at           INTEGER NOT NULL,
    detail_json          TEXT    NOT NULL DEFAULT '{}',
    -- Absence on page one is not absence: "not applied" only after the list ran out.
    CHECK (outcome <> 'CONFIRMED_NOT_APPLIED' OR pagination_exhausted = 1)
) STRICT;

-- Stamped rail entities seen outside an attempt's own answer (a signed webhook, SPEC §17): evidence of presence
-- only (ADR 0027). One row per (source, reference, SIK), the entity as the rail stated it; audit-chained.
-- taken_at: when the lifecycle follower took it as an observation of the applied intent (reconciler/lifecycle.py),
-- in that observation's transaction; NULL until then, and a kept sighting not taken yet is taken by a later step.
CREATE TABLE IF NOT EXISTS rail_sightings (
    merchant_id  TEXT    NOT NULL,
    sik          TEXT    NOT NULL,
    source       TEXT    NOT NULL CHECK (source IN ('webhook')),
    ref          TEXT    NOT NULL,          -- the webhook's event id
    event        TEXT    NOT NULL,          -- e.g. refund.processed
    entity_id    TEXT    NOT NULL,
    status       TEXT,
    entity_json  TEXT    NOT NULL,
    seen_at      INTEGER NOT NULL,
    taken_at     INTEGER,
    PRIMARY KEY (source, ref, sik)
) STRICT;
CREATE INDEX IF NOT EXISTS rail_sightings_by_intent ON rail_sightings (merchant_id, sik);

-- The lifecycle after APPLIED (issue 27; docs/webhooks.md): what the rail says has become of the money since it
-- accepted the call (a refund pending → processed | failed; an instant settlement created → initiated →
-- processed | partially_processed | reversed). Not states of the money machine (I4: APPLIED is absorbing): one
-- row per applied intent with its current status, fed by webhooks, the call's own answer and a poller; a final
-- status is never overwritten by an earlier one. Each change is audit-chained (RAIL_STATUS) and kept in history.
CREATE TABLE IF NOT EXISTS rail_status (
    merchant_id   TEXT    NOT NULL,
    sik           TEXT    NOT NULL,
    tool          TEXT    NOT NULL,
    entity_id     TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    final         INTEGER NOT NULL CHECK (final IN (0, 1)),
    attention     TEXT,                     -- why a person must look (REFUND_FAILED, SETTLEMENT_REVERSED, ...)
    amounts_json  TEXT    NOT NULL,         -- the entity's amounts with this status (integers, minor units)
    source        TEXT    NOT NULL,         -- where the current status was read: answer, webhook, poll
    updated_at    INTEGER NOT NULL,
    next_poll_at  INTEGER,                  -- when the poller fetches the entity next; NULL once final
    polls         INTEGER NOT NULL DEFAULT 0,
    raised_seq    INTEGER,                  -- the RAIL_STATUS audit record that raised the attention (NULL: none)
    PRIMARY KEY (merchant_id, sik)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS rail_status_due ON rail_status (final, next_poll_at);
-- The poller's list: every row with a fetch to come (not final, or final and still watched: a processed payout).
CREATE INDEX IF NOT EXISTS rail_status_next_poll ON rail_status (next_poll_at) WHERE next_poll_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS rail_status_attention ON rail_status (attention) WHERE attention IS NOT NULL;

-- APPLIED intents owed a rail_status row: what the lifecycle follower is to start following (reconciler/lifecycle.py).
-- A row is added by the trigger below in the transaction that makes the intent APPLIED, whichever actor commits it
-- and whatever its clock says, and removed in the transaction that writes the intent's first rail_status row (or by
-- the follower, for an intent it cannot follow). The follower reads it by rowid, a page a step, the oldest first.
CREATE TABLE IF NOT EXISTS rail_status_owed (
    merchant_id  TEXT    NOT NULL,
    sik          TEXT    NOT NULL,
    PRIMARY KEY (merchant_id, sik)
) STRICT;

CREATE TRIGGER IF NOT EXISTS intents_applied_owe_rail_status
AFTER UPDATE OF state ON intents
WHEN NEW.state = 'APPLIED' AND OLD.state IS NOT 'APPLIED'
BEGIN
    INSERT OR IGNORE INTO rail_status_owed (merchant_id, sik) VALUES (NEW.merchant_id, NEW.sik);
END;

-- The order in which intents became APPLIED, by commit (finding F9, ADR 0032 amended). A gate notes the highest seq
-- (queries.applied_mark) before it reads the rail for G2; the admission, and a hold's release, count as "applied
-- since that read" every intent with a higher seq. Commit order needs no clock: a wall clock stepped back for every
-- process, further than any skew allowance, cannot hide money applied after the read. Filled by the trigger below in
-- the transaction that makes the intent APPLIED, whichever actor commits it. Never updated or deleted: an intent
-- is APPLIED once (I4), and the restore copies the table with the rest of the file.
CREATE TABLE IF NOT EXISTS applied_order (
    seq          INTEGER PRIMARY KEY,   -- the highest + 1: rows are never deleted, so it only grows
    merchant_id  TEXT    NOT NULL,
    sik          TEXT    NOT NULL
) STRICT;

CREATE TRIGGER IF NOT EXISTS intents_applied_in_order
AFTER UPDATE OF state ON intents
WHEN NEW.state = 'APPLIED' AND OLD.state IS NOT 'APPLIED'
BEGIN
    INSERT INTO applied_order (merchant_id, sik) VALUES (NEW.merchant_id, NEW.sik);
END;

-- An operator's acknowledgement of an attention (issue 27; docs/webhooks.md): a person has taken it in hand, so it
-- no longer counts as waiting for one (the metric, `interlock status`, the console list). It covers the attention as
-- it was raised (raised_seq = rail_status.raised_seq then: the observation, status and amounts, the person saw): a
-- new attention on the same intent (a conflicting final status after a failed refund), or the same one raised afresh
-- by an observation that changes the money at stake (a settlement reversed further), waits for a person again. One
-- row per attention: a later acknowledgement of it takes the earlier one's place, which stays on the audit chain
-- (RAIL_ATTENTION_ACK). It moves no money and changes neither the intent nor its rail_status.
CREATE TABLE IF NOT EXISTS rail_attention_acks (
    merchant_id      TEXT    NOT NULL,
    sik              TEXT    NOT NULL,
    attention        TEXT    NOT NULL,
    operator         TEXT    NOT NULL,
    credential       TEXT,                  -- the approver credential that authenticated it; NULL: name as typed
    note             TEXT    NOT NULL,      -- what the person is doing about it
    acknowledged_at  INTEGER NOT NULL,
    raised_seq       INTEGER,               -- the raising it covers: the RAIL_STATUS audit record the person saw
    PRIMARY KEY (merchant_id, sik, attention)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS rail_status_history (
    id            INTEGER PRIMARY KEY,
    merchant_id   TEXT    NOT NULL,
    sik           TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    source        TEXT    NOT NULL,
    ref           TEXT,                     -- the webhook's event id; NULL for a poll or an answer
    amounts_json  TEXT    NOT NULL,
    taken         TEXT    NOT NULL CHECK (taken IN ('moved', 'stale', 'conflict')),
    observed_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS rail_status_history_by_intent ON rail_status_history (merchant_id, sik, id);

CREATE TABLE IF NOT EXISTS operation_refs (
    merchant_id   TEXT    NOT NULL,
    operation_ref TEXT    NOT NULL,
    sik           TEXT    NOT NULL,
    bound_at      INTEGER NOT NULL,
    PRIMARY KEY (merchant_id, operation_ref)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS audit_log (
    seq          INTEGER PRIMARY KEY,       -- gapless: assigned as head + 1 inside BEGIN IMMEDIATE
    ts           INTEGER NOT NULL,
    kind         TEXT    NOT NULL,
    payload_json TEXT    NOT NULL,
    prev_hash    TEXT    NOT NULL,
    hash         TEXT    NOT NULL
) STRICT;

-- Every writer asks whether a restore is unfinished (ledger/restore.py): a partial index keeps that one row away,
-- however long the chain.
CREATE INDEX IF NOT EXISTS audit_restore_marks ON audit_log (seq)
    WHERE kind IN ('RESTORE_STARTED', 'RESTORE_FINISHED');

-- The chain's head, moved in the same transaction as each append, so a truncated tail is visible.
CREATE TABLE IF NOT EXISTS audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT    NOT NULL
) STRICT;

CREATE TRIGGER IF NOT EXISTS audit_log_move_head
AFTER INSERT ON audit_log
BEGIN
    INSERT INTO audit_head (id, seq, hash) VALUES (1, NEW.seq, NEW.hash)
    ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash;
END;

-- The audit log is append-only through the ledger package; rewriting it needs the schema changed first.
CREATE TRIGGER IF NOT EXISTS audit_log_no_update
BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'I6: the audit log is append-only');
END;

CREATE TRIGGER IF NOT EXISTS audit_log_no_delete
BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'I6: the audit log is append-only');
END;

-- Singleton leases (the rail worker's; the reconciler's per-intent leases live on intents).
CREATE TABLE IF NOT EXISTS leases (
    name         TEXT    NOT NULL PRIMARY KEY,
    owner        TEXT    NOT NULL,
    epoch        INTEGER NOT NULL CHECK (epoch >= 1),
    heartbeat_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- The shard map this ledger's shard last accepted (SPEC §15, ADR 0014): one row, written by
-- `interlock shards apply` under the write lock with an audit record. ownership_json is the map's
-- ownership (epoch, shard names, explicit assignments), enough to compute any merchant's shard; the
-- rail worker admits a merchant's money only when it says `shard` owns it. No row: no map accepted yet.
CREATE TABLE IF NOT EXISTS shard_ownership (
    name           TEXT    NOT NULL PRIMARY KEY CHECK (name = 'accepted'),
    shard          TEXT    NOT NULL,
    epoch          INTEGER NOT NULL CHECK (epoch >= 0),
    digest         TEXT    NOT NULL,
    ownership_json TEXT    NOT NULL,
    accepted_at    INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- The operator console's sessions (console/auth.py, ADR 0015): a login writes one row, every request a cookie
-- carries is checked against it, and a logout revokes it, so a copied cookie authenticates nobody once its session
-- ended, on every console process serving this ledger and after a restart. Only the sha256 of the cookie's random
-- id is kept: a copy of the ledger (a replica, a backup) opens no session. Operator state, not money: no audit row.
CREATE TABLE IF NOT EXISTS console_sessions (
    session_sha256    TEXT    NOT NULL PRIMARY KEY,
    kind              TEXT    NOT NULL CHECK (kind IN ('approver', 'console')),
    approver_id       TEXT,                 -- the person, for kind 'approver'; NULL for the console token (looks only)
    credential_sha256 TEXT    NOT NULL,     -- the token it was opened with: a rotated or removed one ends it
    issued_at         INTEGER NOT NULL,
    expires_at        INTEGER NOT NULL CHECK (expires_at > issued_at),
    revoked_at        INTEGER,              -- set by logout; a revoked session authenticates nobody
    CHECK ((kind = 'approver') = (approver_id IS NOT NULL))
) STRICT, WITHOUT ROWID;

-- Payees an approver added to a mandate's create_payout payees while releasing a call held for its unlisted payee
-- (ADR 0034): for later calls of that agent under that mandate version only — a replaced mandate (another hash)
-- finds none of them. Each row is written with its PAYEE_ALLOWED audit record, in the transaction that releases
-- the hold; G2 and the release of a later hold read them beside the mandate's own payees. Never updated or deleted.
CREATE TABLE IF NOT EXISTS payee_amendments (
    merchant_id     TEXT    NOT NULL,
    agent_id        TEXT    NOT NULL,
    mandate_hash    TEXT    NOT NULL,       -- the mandate version it amends
    fund_account_id TEXT    NOT NULL,       -- the payee allowed: this fund account, not its contact's others
    contact_id      TEXT    NOT NULL,       -- its contact, as the rail reported it
    payee_digest    TEXT    NOT NULL,       -- the digest of the fund account as the approver was shown it
    approver_id     TEXT    NOT NULL,
    credential      TEXT    NOT NULL,       -- the approver credential that authenticated it (ADR 0015)
    sik             TEXT    NOT NULL,       -- the held call whose release added it
    audit_seq       INTEGER NOT NULL,       -- its PAYEE_ALLOWED record
    allowed_at      INTEGER NOT NULL,
    PRIMARY KEY (merchant_id, agent_id, mandate_hash, fund_account_id)
) STRICT, WITHOUT ROWID;

-- What the reconciler has told a person of (reconciler/notify.py, issue 48 item 5): one row per item waiting for a
-- person — a call HELD, an intent QUARANTINED, an attention raised — keyed by the item as it was then (a call held
-- again after a release, an attention raised again on changed money, is a new item). Sent once (sent_at); a POST the
-- receiver did not take is tried again at next_try_at, doubling, until MAX_ATTEMPTS. Nothing here moves money.
CREATE TABLE IF NOT EXISTS notifications (
    item_key     TEXT    PRIMARY KEY,       -- kind:merchant:sik:version
    kind         TEXT    NOT NULL CHECK (kind IN ('held', 'quarantined', 'attention')),
    merchant_id  TEXT    NOT NULL,
    sik          TEXT    NOT NULL,
    body_json    TEXT    NOT NULL,          -- exactly what is POSTed (and signed) every try
    created_at   INTEGER NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_try_at  INTEGER NOT NULL,
    sent_at      INTEGER,
    given_up_at  INTEGER,
    last_error   TEXT
) STRICT;
CREATE INDEX IF NOT EXISTS notifications_due ON notifications (next_try_at) WHERE sent_at IS NULL AND given_up_at IS NULL;
