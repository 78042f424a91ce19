"""Small pieces every Governor component shares: env-backed CLI options, logging, secrets."""
