"""The SQLite write-ahead ledger: schema, the state-machine table and its single transition
function, intents, attempts, decisions, findings and the hash-chained audit log. The ledger,
not the queue, is the source of truth; it is written only through this package."""
