"""The listen stage's room: ``executor`` (the stage), ``stream`` (one caller's
utterances) and the models they drive."""
