"""sprat's benchmark harness: data sets, tools as declarative entries, interleaved rounds,
medians and ratios, CSV, markdown and PNG reports, all behind `bench/run`.

Modules: `sets` (data set recipes), `tools` (tool entries and command templates), `suites`
(presets and argument parsing), `stats` (medians, ratios), `report` (CSV, markdown, plot),
`proc` (processes, timing, caches), `servers` (servers and relays on loopback), `verify`
(tree manifests and checks), `runner` (the rounds), `cli` (the entry point).
"""
