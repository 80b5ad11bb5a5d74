"""The think stage's room: one module per thinker engine, and the chat,
tool-call and sampling rules every engine shares."""
