"""Fakes at the HTTP boundary (the model API, chat platforms): the only parts tests replace."""
