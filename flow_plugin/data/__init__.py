"""Data: SentEval-format evaluation files and the corpora calibrators are fitted on."""
