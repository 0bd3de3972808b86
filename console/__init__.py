"""The operator web console (one actor, `interlock console`): intents, timelines, the hold queue,
quarantines and the audit chain. Server-rendered (starlette + jinja2), no JavaScript; every action
calls the same ops/ function as the CLI."""
