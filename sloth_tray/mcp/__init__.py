"""`sloth-tray mcp`: the queue offered to agents over the Model Context Protocol (stdio).

A client of the queue, as the command line is: the app runs the jobs, the server never
runs one. Only `server.py` imports the `mcp` SDK (the `mcp` extra); nothing of the
tray, the daemon or `status` imports this package.

schemas: each tool's JSON schema and description, and the check that says a wrong
argument in one sentence · tools: what each tool does, plain functions over the Queue
and the spool · server: the protocol (tools, resources, subscriptions, progress).
"""
