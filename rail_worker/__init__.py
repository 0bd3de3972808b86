"""The only process that moves money. It holds the singleton lease, admits Decisions into the
ledger, commits IN_FLIGHT durably before every rail call, classifies the rail's answer and
publishes the Outcome."""
