"""Stateless RQ workers that take Proposals from queue "gates", resolve the referent on the rail
(read-only), run the six-gate ladder G1..G6, compute the SIK and enqueue a Decision on the rail
queue. They open the ledger read-only and hold no state between jobs."""
