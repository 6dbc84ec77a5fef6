"""The Live GPU probe tab: `tab` (a run picked, its readouts and lanes, the modes table), `charts`, `tables`,
`live` (the probe run on this server's GPU), `tp_view` (a tensor-parallel result)."""
