"""The running app: the engine's loop, the runner, the watched folder, the lock."""
