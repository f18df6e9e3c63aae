"""Generic Python semantics: the one walk over a module and the model answering questions from it."""
