"""The pure admission policies: by class (the ledger) and by first-token deadline."""
