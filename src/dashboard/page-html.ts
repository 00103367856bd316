import { JOB_STATUSES } from '../job.js'

/** Escapes text for an HTML attribute or element. */
function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`)
}

/**
 * The dashboard's HTML for an API mounted under `basePath` (empty at the
 * root): the page's skeleton, which app.js fills from the API. Its assets
 * are named by absolute paths under the base path, so the page works at
 * `/jobs` as at `/`. No inline script or style: the page's
 * Content-Security-Policy allows neither.
 */
export function pageHtml(basePath: string): string {
  const base = escapeHtml(basePath)
  const statusOptions = JOB_STATUSES.map((s) => `<option value="${s}">${s}</option>`).join('')
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>jobtable</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${base}/dashboard/style.css">
<script type="module" src="${base}/dashboard/app.js"></script>
</head>
<body>
<header class="bar">
  <h1>jobtable</h1>
  <p id="connection" class="connection" role="status" aria-live="polite" data-state="loading">Connecting…</p>
  <div class="bar-actions">
    <label class="toggle"><input id="live" type="checkbox" checked> Live</label>
    <button id="refresh" type="button">Refresh</button>
    <button id="forget-token" type="button" hidden>Forget token</button>
  </div>
</header>
<main>
  <section id="problem" class="problem" role="alert" aria-labelledby="problem-title" hidden>
    <h2 id="problem-title"></h2>
    <p id="problem-text"></p>
    <form id="token-form" class="token-form" hidden>
      <label for="token">Bearer token</label>
      <input id="token" name="token" type="password" autocomplete="off" spellcheck="false" required>
      <button type="submit">Use token</button>
    </form>
  </section>

  <div id="data" class="layout" hidden>
    <div class="column">
      <section class="card" aria-labelledby="counts-title">
        <h2 id="counts-title">Counts <span id="counted-at" class="when"></span></h2>
        <div class="scroll">
          <table id="counts">
            <thead><tr><th scope="col">Kind</th>${JOB_STATUSES.map((s) => `<th scope="col" class="wide-count"><span class="status status-${s}">${s}</span></th>`).join('')}<th scope="col" class="narrow">Jobs</th><th scope="col">total</th></tr></thead>
            <tbody></tbody>
          </table>
        </div>
        <p id="counts-empty" class="empty" hidden>No jobs yet.</p>
      </section>

      <section id="activity" class="card" aria-labelledby="activity-title">
        <h2 id="activity-title">Last hour <span id="activity-at" class="when"></span></h2>
        <p id="activity-note" class="note" hidden></p>
        <div id="activity-body" hidden>
          <h3 id="finished-title">Finished per minute</h3>
          <p id="finished-summary" class="chart-summary"></p>
          <ul class="legend" aria-hidden="true">${['succeeded', 'failed', 'cancelled'].map((s) => `<li><span class="swatch swatch-${s}"></span>${s}</li>`).join('')}</ul>
          <div class="chart"><svg id="finished-chart" class="chart-svg" role="img" aria-labelledby="finished-title finished-summary"></svg></div>
          <h3 id="queued-title">Queued now, by kind</h3>
          <p id="queued-summary" class="chart-summary"></p>
          <div class="chart"><svg id="queued-chart" class="chart-svg" role="img" aria-labelledby="queued-title queued-summary"></svg></div>
        </div>
      </section>

      <section class="card" aria-labelledby="jobs-title">
        <h2 id="jobs-title">Jobs</h2>
        <form id="filters" class="filters">
          <label>Status <select id="filter-status" name="status"><option value="">any</option>${statusOptions}</select></label>
          <label>Kind <select id="filter-kind" name="kind"><option value="">any</option></select></label>
          <button id="clear-filters" type="button">Clear</button>
        </form>
        <div class="scroll">
          <table id="jobs">
            <thead><tr><th scope="col">Job</th><th scope="col">Kind</th><th scope="col">Status</th><th scope="col" class="wide">Attempt</th><th scope="col" class="wide">Enqueued</th><th scope="col" class="wide">Due</th></tr></thead>
            <tbody></tbody>
          </table>
        </div>
        <p id="jobs-empty" class="empty" hidden>No jobs match.</p>
        <nav class="pager" aria-label="Pages of jobs">
          <button id="newer" type="button" disabled>← Newer</button>
          <span id="page-label">Page 1</span>
          <button id="older" type="button" disabled>Older →</button>
        </nav>
      </section>

      <section id="schedules" class="card" aria-labelledby="schedules-title">
        <h2 id="schedules-title">Schedules</h2>
        <p id="schedules-note" class="note" hidden></p>
        <div id="schedules-body" hidden>
          <div class="scroll">
            <table id="schedules-table">
              <thead><tr><th scope="col">Name</th><th scope="col">Kind</th><th scope="col">Pattern</th><th scope="col">Zone</th><th scope="col">Last tick</th><th scope="col">Next tick</th></tr></thead>
              <tbody></tbody>
            </table>
          </div>
          <p id="schedules-empty" class="empty" hidden>This server declares no recurring schedules.</p>
        </div>
      </section>
    </div>

    <div class="column">
      <section id="detail" class="card" aria-labelledby="detail-title" hidden>
        <h2 id="detail-title" tabindex="-1">Job</h2>
        <dl class="fields">
          <dt>Id</dt><dd id="d-id" class="mono"></dd>
          <dt>Kind</dt><dd id="d-kind"></dd>
          <dt>Enqueued</dt><dd id="d-enqueued"></dd>
          <dt>Status</dt><dd><span id="d-status" class="status"></span></dd>
          <dt>Attempt</dt><dd id="d-attempt"></dd>
          <dt>Runs next</dt><dd id="d-next"></dd>
          <dt>Due at</dt><dd id="d-due"></dd>
          <dt>Priority</dt><dd id="d-priority"></dd>
          <dt>Failure</dt><dd id="d-error" class="mono"></dd>
        </dl>
        <h3>Result</h3>
        <pre id="d-result" class="result" tabindex="0"></pre>
        <div class="actions">
          <button id="cancel" type="button">Cancel</button>
          <button id="retry" type="button">Retry now</button>
          <button id="close-detail" type="button">Close</button>
        </div>
        <p id="action-result" class="action-result" role="status" aria-live="polite"></p>
        <h3>Updates</h3>
        <ol id="d-log" class="log"></ol>
      </section>

      <section id="rate-limits" class="card" aria-labelledby="rate-limits-title">
        <h2 id="rate-limits-title">Rate limits</h2>
        <p id="rate-limits-note" class="note" hidden></p>
        <div id="rate-limits-body" hidden>
          <ul id="rate-limits-list" class="rate-limits"></ul>
          <p id="rate-limits-empty" class="empty" hidden>No kind has a rate limit, and no key is cooling down.</p>
          <p id="cooldown-result" class="action-result" role="status" aria-live="polite"></p>
        </div>
      </section>

      <section id="paused" class="card" aria-labelledby="paused-title">
        <h2 id="paused-title">Paused kinds</h2>
        <p id="paused-note" class="note" hidden></p>
        <div id="paused-body" hidden>
          <ul id="paused-list" class="paused-list"></ul>
          <p id="paused-empty" class="empty" hidden>No kind is paused.</p>
          <form id="pause-form" class="pause-form">
            <label for="pause-kind">Kind</label>
            <input id="pause-kind" name="kind" list="kind-names" required maxlength="256" autocomplete="off">
            <datalist id="kind-names"></datalist>
            <button type="submit">Pause</button>
          </form>
          <p id="pause-result" class="action-result" role="status" aria-live="polite"></p>
        </div>
      </section>
    </div>
  </div>
</main>
</body>
</html>
`
}
