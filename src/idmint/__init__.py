"""idmint: compact, decodable IDs minted across a fleet of processes, never issued twice."""
