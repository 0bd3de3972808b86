"""The actor runtime: how an actor process consumes its queue (runtime.consumer)."""
