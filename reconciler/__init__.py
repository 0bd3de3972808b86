"""Turns every ambiguous outcome (UNKNOWN, expired IN_FLIGHT) into a definite one by paging the
rail's lists for our stamp, never by guessing; re-enqueues confirmed-absent intents to the rail
worker and quarantines what it cannot settle."""
