"""The chaos matrix: real processes SIGKILLed at named failpoints (or redis-server killed mid-call), or the
rail worker SIGSTOPped at one and woken after a standby took its lease, or SIGKILLed with a burst of calls in
flight, under rail fault profiles, judged by a verdict engine against the sandbox's journal; plus random
kills during a burst of concurrent calls. Results are written into RESULTS.md."""
