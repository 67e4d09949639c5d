"""Resource kinds: one registry (`kinds.registry.REGISTRY`) from which the api's routes,
the errors' names, the client's paths and the CLI's names and tables are derived."""
