"""The SIGKILL matrix runner and verdict engine: real processes killed at named failpoints under
rail faults, judged against the sandbox journal. Not yet built: see issue 7."""
