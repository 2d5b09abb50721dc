"""The engine integrations, one subpackage per engine (``sglang``), each building the
``dsv41_flags.engine.EngineAdapter`` it declares in the entry-point group ``dsv41_flags.engines``;
``http_client`` is the client they share for an engine server's live routes."""
