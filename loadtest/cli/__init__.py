"""The command line's shared parts: the flag groups every command spells one way (``flags``) and the shape a
study command follows (``study``)."""
