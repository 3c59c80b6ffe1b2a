"""Pure: what joins the allocator, MIG and device layers into views for people (fleet summaries, the web view's
cards). No I/O: callers pass in the objects they listed or watched."""
