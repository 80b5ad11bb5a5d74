"""The listen stage's room: ``executor`` (the stage) and the models it drives."""
