/**
 * The dashboard's style sheet (served as `<basePath>/dashboard/style.css`):
 * system fonts only (nothing is fetched from elsewhere), a light and a
 * dark scheme, visible focus, and one column up to 960 px wide, two
 * beyond. Statuses are told by their word, never by colour alone.
 */
export const STYLE_CSS = String.raw`:root {
  color-scheme: light dark;
  --bg: #f6f7f9;
  --card: #ffffff;
  --text: #1c2430;
  --muted: #5b6675;
  --line: #dde2e8;
  --accent: #1f5fbf;
  --focus: #f0a500;
  --bad: #b3261e;
  --bad-bg: #fdecea;
  --warn-bg: #fff4d6;
  --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  font-size: 15px;
  line-height: 1.45;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #12161c;
    --card: #1b2129;
    --text: #e6eaef;
    --muted: #9aa5b3;
    --line: #2e3742;
    --accent: #7fb0ff;
    --bad: #ff8a80;
    --bad-bg: #3a1d1b;
    --warn-bg: #3a3118;
  }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--text); }
h1 { font-size: 1.25rem; margin: 0; letter-spacing: 0.02em; }
h2 { font-size: 1.05rem; margin: 0 0 0.75rem; }
h3 { font-size: 0.9rem; margin: 1rem 0 0.4rem; color: var(--muted); text-transform: uppercase; letter-spacing: 0.04em; }
[hidden] { display: none !important; }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; }
h2:focus { outline: none; }
h2:focus-visible { outline: 3px solid var(--focus); }

.bar {
  display: flex; flex-wrap: wrap; align-items: center; gap: 0.5rem 1rem;
  padding: 0.75rem 1rem; background: var(--card); border-bottom: 1px solid var(--line);
}
@media (min-width: 641px) {
  .bar { position: sticky; top: 0; z-index: 1; }
}
.connection { margin: 0; color: var(--muted); flex: 1 1 auto; font-size: 0.9rem; }
.connection[data-state="ok"]::before { content: "●"; color: #2e9d57; margin-right: 0.35em; }
.connection[data-state="unreachable"], .connection[data-state="unauthorized"] { color: var(--bad); font-weight: 600; }
.bar-actions { display: flex; align-items: center; gap: 0.5rem; }
.toggle { display: inline-flex; align-items: center; gap: 0.3rem; font-size: 0.9rem; }

main { padding: 1rem; max-width: 1400px; margin: 0 auto; }
.layout { display: grid; gap: 1rem; grid-template-columns: minmax(0, 1fr); }
.column { display: grid; gap: 1rem; align-content: start; grid-template-columns: minmax(0, 1fr); min-width: 0; }
@media (min-width: 960px) {
  .layout { grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); }
}
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 1rem; min-width: 0; }
.stale { opacity: 0.55; }

.problem { border: 2px solid var(--bad); background: var(--bad-bg); border-radius: 8px; padding: 1rem; margin-bottom: 1rem; }
.problem h2 { color: var(--bad); }
.problem p { margin: 0 0 0.5rem; }
.token-form, .pause-form, .filters { display: flex; flex-wrap: wrap; align-items: center; gap: 0.5rem; }
.token-form input { flex: 1 1 16rem; }

button, input, select {
  font: inherit; color: inherit; background: var(--card);
  border: 1px solid var(--line); border-radius: 6px; padding: 0.35rem 0.7rem; min-height: 2.25rem;
}
button { cursor: pointer; background: var(--bg); }
button:hover:not(:disabled) { border-color: var(--accent); }
button:disabled { opacity: 0.45; cursor: not-allowed; }
button.link { border: none; background: none; padding: 0.1rem 0.2rem; min-height: 0; color: var(--accent); text-decoration: underline; }
#cancel:not(:disabled) { border-color: var(--bad); color: var(--bad); }
label { display: inline-flex; align-items: center; gap: 0.4rem; }

.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: 0.92rem; }
th, td { text-align: left; padding: 0.35rem 0.5rem; border-bottom: 1px solid var(--line); white-space: nowrap; }
thead th { color: var(--muted); font-weight: 600; font-size: 0.8rem; }
tfoot th, tfoot td { font-weight: 600; border-bottom: none; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
#counts thead th:not(:first-child):not(.narrow) { text-align: right; }
.zero { color: var(--muted); opacity: 0.6; }
.total { font-weight: 600; }
tr[aria-current] { background: color-mix(in srgb, var(--accent) 14%, transparent); }
.when { color: var(--muted); font-size: 0.8rem; font-weight: 400; margin-left: 0.4rem; }
.mono { font-family: var(--mono); font-size: 0.88em; }
.empty, .note { color: var(--muted); margin: 0.5rem 0; }
.filters { margin-bottom: 0.75rem; }
.pager { display: flex; align-items: center; justify-content: space-between; gap: 0.5rem; margin-top: 0.75rem; }

.status { display: inline-block; padding: 0.05rem 0.5rem; border-radius: 999px; font-size: 0.8rem; font-weight: 600; border: 1px solid currentColor; }
.status-scheduled { color: #7a5cc2; }
.status-queued { color: #8a6d00; }
.status-running { color: #1f6fd1; }
.status-succeeded { color: #1e8a4c; }
.status-failed { color: var(--bad); }
.status-cancelled { color: var(--muted); }
@media (prefers-color-scheme: dark) {
  .status-scheduled { color: #b9a2ff; }
  .status-queued { color: #e6c350; }
  .status-running { color: #7fb0ff; }
  .status-succeeded { color: #6fd49a; }
}

.fields { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 0.3rem 1rem; margin: 0; }
.fields dt { color: var(--muted); }
.fields dd { margin: 0; overflow-wrap: anywhere; }
.result {
  font-family: var(--mono); font-size: 0.85rem; background: var(--bg); border: 1px solid var(--line);
  border-radius: 6px; padding: 0.6rem; margin: 0; max-height: 22rem; overflow: auto; white-space: pre-wrap; overflow-wrap: anywhere;
}
.result.none { color: var(--muted); }
.actions { display: flex; flex-wrap: wrap; gap: 0.5rem; margin-top: 1rem; }
.action-result { min-height: 1.4em; margin: 0.5rem 0 0; }
.log { margin: 0; padding-left: 1.2rem; color: var(--muted); font-size: 0.85rem; max-height: 12rem; overflow: auto; }
.paused-list { list-style: none; margin: 0 0 0.75rem; padding: 0; }
.paused-list li { display: flex; flex-wrap: wrap; align-items: center; gap: 0.5rem 1rem; padding: 0.35rem 0; border-bottom: 1px solid var(--line); }
.paused-list .since { color: var(--muted); font-size: 0.85rem; flex: 1 1 auto; }

.sub { display: block; color: var(--muted); font-size: 0.8rem; font-weight: 400; }
.rate-limits { list-style: none; margin: 0; padding: 0; }
.rate-limits > li { padding: 0.5rem 0; border-bottom: 1px solid var(--line); }
.rl-head { display: flex; align-items: flex-start; gap: 0.5rem; }
.rl-name { flex: 1 1 auto; min-width: 0; overflow-wrap: anywhere; }
.rl-fields { display: flex; flex-wrap: wrap; gap: 0.2rem 1.5rem; margin: 0.35rem 0 0; }
.rl-fields dt { color: var(--muted); font-size: 0.75rem; }
.rl-fields dd { margin: 0; font-variant-numeric: tabular-nums; }
.rl-fields dd.full { color: var(--bad); font-weight: 600; }
.scopes { display: flex; flex-wrap: wrap; gap: 0.1rem 0.9rem; list-style: none; margin: 0.35rem 0 0; padding: 0; color: var(--muted); font-size: 0.8rem; }
.scopes li, .rl-scope { max-width: 14rem; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.rl-scope { display: inline-block; vertical-align: bottom; font-weight: 600; }
.scope-cooldowns { list-style: none; margin: 0.35rem 0 0; padding: 0; }
.scope-cooldowns li { display: flex; flex-wrap: wrap; align-items: center; gap: 0.25rem; padding: 0.15rem 0; }
.scope-cooldowns button { margin-left: auto; }
.scope-cooldowns .more { color: var(--muted); font-size: 0.8rem; }

/* The charts: bars take their colour from these classes (the page's policy allows no inline style). */
.chart { overflow: hidden; }
.chart-svg { display: block; }
.chart-svg text { fill: var(--muted); font-size: 12px; font-family: inherit; font-variant-numeric: tabular-nums; }
.chart-svg text.label { fill: var(--text); }
.chart-svg .grid, .chart-svg .tick { stroke: var(--line); stroke-width: 1; }
.chart-summary { margin: 0 0 0.4rem; }
.legend { display: flex; flex-wrap: wrap; gap: 0.25rem 1rem; list-style: none; margin: 0 0 0.4rem; padding: 0; color: var(--muted); font-size: 0.85rem; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; border-radius: 2px; margin-right: 0.35em; vertical-align: -0.05em; }
.bar-succeeded { fill: #1e8a4c; }
.bar-failed { fill: var(--bad); }
.bar-cancelled { fill: #8a94a3; }
.bar-queued { fill: #c9a227; }
.swatch-succeeded { background: #1e8a4c; }
.swatch-failed { background: var(--bad); }
.swatch-cancelled { background: #8a94a3; }
@media (prefers-color-scheme: dark) {
  .bar-succeeded { fill: #6fd49a; }
  .swatch-succeeded { background: #6fd49a; }
  .bar-queued { fill: #e6c350; }
}

.narrow { display: none; }
.summary { white-space: normal; }
.summary .link { margin-right: 0.6rem; }
@media (max-width: 640px) {
  .narrow { display: table-cell; }
  .wide-count { display: none; }
  main { padding: 0.5rem; }
  .card { padding: 0.75rem; }
  .wide { display: none; }
  th, td { padding: 0.3rem 0.35rem; }
  /* Schedules as one block each, every field labelled: six columns do not fit a phone. */
  #schedules-table thead { display: none; }
  #schedules-table tr { display: block; padding: 0.35rem 0; border-bottom: 1px solid var(--line); }
  #schedules-table th, #schedules-table td { display: flex; gap: 0.75rem; border: none; padding: 0.1rem 0.35rem; white-space: normal; }
  #schedules-table td::before { content: attr(data-label); color: var(--muted); flex: 0 0 5.5rem; }
}
`
