"""CEL for DRA selectors: parse, check, translate to closures, evaluate (``selectors`` is the entry point and the
only module that loads the CEL library; the others are pure Python and cheap to import)."""
