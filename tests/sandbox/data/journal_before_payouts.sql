-- A sandbox journal as the sandbox wrote it before payouts (commit 592a3f9), dumped with sqlite3's iterdump:
-- the demo seed, one stamped pending refund with its X-Refund-Idempotency key, one created instant settlement,
-- and both in the lifecycle schedule. tests/sandbox/test_sandbox_payouts.py opens it with the current sandbox.
BEGIN TRANSACTION;
CREATE TABLE balances (currency TEXT PRIMARY KEY, amount INTEGER NOT NULL) STRICT;
INSERT INTO "balances" VALUES('INR',4980000);
CREATE TABLE entities (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('refund', 'settlement')),
    payment_id TEXT,
    stamp_sik TEXT,
    receipt TEXT,
    created_ms INTEGER NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('api', 'seed')),
    fault TEXT,
    idempotency_key TEXT,
    entity_json TEXT NOT NULL,
    request_json TEXT NOT NULL,
    headers_json TEXT NOT NULL
) STRICT;
INSERT INTO "entities" VALUES(1,'rfnd_14wX78gvFnCyGf','refund','pay_DEMO0001','OLDSIKAAAAAAAAAAAAAAAAAAAAAAAAAA','ilk_OLDSIKAAAAAAAAAAAAAAAAAAAAAAAAAA',1796298341989,'api',NULL,'old-key-0000000001','{"id":"rfnd_14wX78gvFnCyGf","entity":"refund","amount":10000,"currency":"INR","payment_id":"pay_DEMO0001","notes":{"interlock_sik":"OLDSIKAAAAAAAAAAAAAAAAAAAAAAAAAA"},"receipt":"ilk_OLDSIKAAAAAAAAAAAAAAAAAAAAAAAAAA","acquirer_data":{"arn":null},"created_at":1796298341,"batch_id":null,"status":"pending","speed_processed":"normal","speed_requested":"normal"}','{"amount":10000}','{"x-refund-idempotency":"old-key-0000000001"}');
INSERT INTO "entities" VALUES(2,'setlod_OLDSETTLEMENT01','settlement',NULL,NULL,NULL,1796298341989,'api',NULL,NULL,'{"id":"setlod_OLDSETTLEMENT01","entity":"settlement.ondemand","amount_requested":20000,"status":"created","notes":[],"created_at":1796298341}','{"amount":20000}','{}');
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    detail_json TEXT NOT NULL
) STRICT;
INSERT INTO "events" VALUES(1,1796298341973,'payment_upserted','{"amount":189900,"amount_refunded":0,"created_at":1796298341,"currency":"INR","details":{"contact":"+919687665805","customer_id":"cust_pQOnSbgX8IV9nM","description":null,"email":"customer.911394a9@example.com","method":"card","order_id":"order_i8Rd9QNSl6dzvC"},"id":"pay_DEMO0001","notes":{}}');
INSERT INTO "events" VALUES(2,1796298341974,'payment_upserted','{"amount":49900,"amount_refunded":0,"created_at":1796298341,"currency":"INR","details":{"contact":"+919991307987","customer_id":"cust_dOjDCNhOWJH4xT","description":null,"email":"customer.3daa65ed@example.com","method":"card","order_id":"order_6yNtVUWtSWhw9V"},"id":"pay_DEMO0002","notes":{}}');
INSERT INTO "events" VALUES(3,1796298341974,'payment_upserted','{"amount":1250000,"amount_refunded":250000,"created_at":1796298341,"currency":"INR","details":{"contact":"+919016752887","customer_id":"cust_9rkmhxd2uUnbcB","description":null,"email":"customer.2731ba10@example.com","method":"card","order_id":"order_xIWBgfqs2QaJMu"},"id":"pay_DEMO0003","notes":{}}');
INSERT INTO "events" VALUES(4,1796298341974,'payment_upserted','{"amount":99900,"amount_refunded":0,"created_at":1796298341,"currency":"INR","details":{"contact":"+919064599125","customer_id":"cust_fsQjdiFq1DOLSX","description":null,"email":"customer.39808dd8@example.com","method":"card","order_id":"order_E2NRsTbeX4VDOS"},"id":"pay_DEMO0004","notes":{"order":"demo-4"}}');
INSERT INTO "events" VALUES(5,1796298341974,'balance_set','{"amount":5000000,"currency":"INR"}');
CREATE TABLE idempotency_keys (
    key TEXT PRIMARY KEY,
    body_hash TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    created_ms INTEGER NOT NULL
) STRICT;
INSERT INTO "idempotency_keys" VALUES('old-key-0000000001','0000000000000000000000000000000000000000000000000000000000000000','rfnd_14wX78gvFnCyGf',1796298341989);
CREATE TABLE lifecycle (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    entity_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('refund', 'settlement')),
    due_ms INTEGER NOT NULL,
    status TEXT NOT NULL
) STRICT;
INSERT INTO "lifecycle" VALUES(1,'rfnd_14wX78gvFnCyGf','refund',1796298342989,'processed');
INSERT INTO "lifecycle" VALUES(2,'setlod_OLDSETTLEMENT01','settlement',1796298342489,'initiated');
INSERT INTO "lifecycle" VALUES(3,'setlod_OLDSETTLEMENT01','settlement',1796298342989,'processed');
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;
INSERT INTO "meta" VALUES('seeded','demo');
CREATE TABLE payments (
    id TEXT PRIMARY KEY,
    amount INTEGER NOT NULL,
    currency TEXT NOT NULL,
    amount_refunded INTEGER NOT NULL,
    notes_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    details_json TEXT NOT NULL DEFAULT '{}'
) STRICT;
INSERT INTO "payments" VALUES('pay_DEMO0001',189900,'INR',10000,'{}',1796298341,'{"contact":"+919687665805","customer_id":"cust_pQOnSbgX8IV9nM","description":null,"email":"customer.911394a9@example.com","method":"card","order_id":"order_i8Rd9QNSl6dzvC"}');
INSERT INTO "payments" VALUES('pay_DEMO0002',49900,'INR',0,'{}',1796298341,'{"contact":"+919991307987","customer_id":"cust_dOjDCNhOWJH4xT","description":null,"email":"customer.3daa65ed@example.com","method":"card","order_id":"order_6yNtVUWtSWhw9V"}');
INSERT INTO "payments" VALUES('pay_DEMO0003',1250000,'INR',250000,'{}',1796298341,'{"contact":"+919016752887","customer_id":"cust_9rkmhxd2uUnbcB","description":null,"email":"customer.2731ba10@example.com","method":"card","order_id":"order_xIWBgfqs2QaJMu"}');
INSERT INTO "payments" VALUES('pay_DEMO0004',99900,'INR',0,'{"order":"demo-4"}',1796298341,'{"contact":"+919064599125","customer_id":"cust_fsQjdiFq1DOLSX","description":null,"email":"customer.39808dd8@example.com","method":"card","order_id":"order_E2NRsTbeX4VDOS"}');
CREATE INDEX entities_by_payment ON entities (payment_id, seq);
CREATE INDEX entities_by_stamp ON entities (stamp_sik);
CREATE INDEX entities_by_receipt ON entities (receipt);
CREATE INDEX lifecycle_due ON lifecycle (due_ms);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('events',5);
INSERT INTO "sqlite_sequence" VALUES('entities',2);
INSERT INTO "sqlite_sequence" VALUES('lifecycle',3);
COMMIT;
