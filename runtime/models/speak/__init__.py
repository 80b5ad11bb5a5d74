"""The speak stage's room: ``executor`` (the stage), clause splitting and the
speech synthesisers."""
