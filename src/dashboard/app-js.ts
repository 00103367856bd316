/**
 * The dashboard's script (served as `<basePath>/dashboard/app.js`), an ES
 * module for the browser. It reads and acts through the public HTTP API
 * only, at `<basePath>/api/v1/` found from its own URL, with the caller's
 * bearer token when one was given (kept in sessionStorage: gone when the
 * tab closes). Every value from the API reaches the page as text
 * (textContent), never as HTML.
 *
 * Kept as a string so it ships in the built package as it is; plain
 * JavaScript with no template literals, which this string could not hold.
 */
export const APP_JS = String.raw`// The jobtable dashboard: see src/dashboard/app-js.ts.
import { readEvents } from './sse.js'
import { drawFinished, drawQueued } from './chart.js'

const STATUSES = ['scheduled', 'queued', 'running', 'succeeded', 'failed', 'cancelled']
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled'])
const CANCELLABLE = new Set(['scheduled', 'queued', 'running'])
const RETRYABLE = new Set(['scheduled', 'failed', 'cancelled'])
const REFRESH_MS = 3000
// Counting reads every job of the caller's scope (about 1.3 µs a job on SQLite, where it holds the server's
// event loop meanwhile): the counts refresh less often than the list, and at once on the Refresh button.
const COUNTS_MS = 15000
const RECONNECT_MS = 2000
const PAGE_SIZE = 20
// A per-scope limit's scopes cooling down shown under it: the longest ones.
const MAX_SCOPE_COOLDOWNS = 5
const TOKEN_KEY = 'jobtable.dashboard.token'
// This script is <base>/dashboard/app.js; the API is <base>/api/v1/.
const API = new URL('../api/v1/', import.meta.url)
const JOB_HASH = /^#job=([0-9a-fA-F-]{36})$/

const $ = (id) => document.getElementById(id)

/** Why a call to the API failed: unreachable (no answer, or 5xx), unauthenticated (401), forbidden (403), or problem (another 4xx). */
class ApiError extends Error {
  constructor(kind, status, body) {
    super(kind)
    this.kind = kind
    this.status = status
    this.body = body
  }
}

const state = {
  status: '',
  kind: '',
  cursors: [null],
  nextCursor: null,
  kinds: new Set(),
  paused: new Set(),
  selected: null,
  job: null,
  watching: null,
  problem: null,
  timer: null,
  loading: null,
  countedAt: 0,
  countsWanted: true,
  activity: null,
  drawing: false,
  drawnWidth: 0,
}

function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY)
  } catch {
    return null
  }
}

function storeToken(token) {
  try {
    if (token === null) sessionStorage.removeItem(TOKEN_KEY)
    else sessionStorage.setItem(TOKEN_KEY, token)
  } catch {
    // Storage refused (a private window): the token lasts until the page reloads.
  }
  memoryToken = token
  $('forget-token').hidden = token === null
}
let memoryToken = storedToken()

/** Calls the API; resolves to { status, body }, or to the response itself for a stream. */
async function call(method, path, options) {
  const opts = options || {}
  const headers = { accept: opts.stream ? 'text/event-stream' : 'application/json' }
  if (memoryToken) headers.authorization = 'Bearer ' + memoryToken
  let response
  try {
    response = await fetch(new URL(path, API), { method, headers, signal: opts.signal, cache: 'no-store', credentials: 'same-origin' })
  } catch (err) {
    if (opts.signal && opts.signal.aborted) throw err
    throw new ApiError('unreachable', 0, null)
  }
  if (response.status >= 500) throw new ApiError('unreachable', response.status, null)
  if (response.status === 401) throw new ApiError('unauthenticated', 401, null)
  if (opts.stream && response.ok) return response
  let body = null
  try {
    body = await response.json()
  } catch {
    body = null
  }
  if (response.status === 403) throw new ApiError('forbidden', 403, body)
  if (!response.ok) throw new ApiError('problem', response.status, body)
  return { status: response.status, body }
}

/** Makes an element with text content and attributes; never parses HTML. */
function el(tag, attrs, text) {
  const node = document.createElement(tag)
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === false || value === null || value === undefined) continue
    if (name === 'className') node.className = value
    else node.setAttribute(name, value === true ? '' : String(value))
  }
  if (text !== undefined && text !== null) node.textContent = String(text)
  return node
}

function localTime(ms) {
  return new Date(ms).toLocaleString()
}

/** The enqueue time a UUID version 7 id carries in its first 48 bits, or null for another id. */
function enqueuedAt(id) {
  if (typeof id !== 'string' || id[14] !== '7') return null
  const ms = parseInt(id.slice(0, 8) + id.slice(9, 13), 16)
  return Number.isFinite(ms) ? ms : null
}

function shortId(id) {
  return '…' + id.slice(-8)
}

function statusBadge(status) {
  return el('span', { className: 'status status-' + status }, status)
}

// ---- the page's states: connected, unreachable, not authorized ----

function setConnection(text, kind) {
  const node = $('connection')
  node.textContent = text
  node.dataset.state = kind
}

function connected() {
  const wasProblem = state.problem
  state.problem = null
  $('problem').hidden = true
  $('token-form').hidden = true
  $('data').hidden = false
  $('data').classList.remove('stale')
  setConnection(($('live').checked ? 'Live · updated ' : 'Updated ') + new Date().toLocaleTimeString(), 'ok')
  drawActivity(false)
  // Back from a refusal or an outage: watch the open job again.
  if (wasProblem && state.selected && state.watching === null) watch(state.selected)
}

/** Removes everything the API showed (the caller is no longer authorized to see it), not only hides it. */
function clearData() {
  stopWatching()
  $('counts').tBodies[0].replaceChildren()
  const foot = $('counts').tFoot
  if (foot) foot.remove()
  $('jobs').tBodies[0].replaceChildren()
  $('paused-list').replaceChildren()
  $('schedules-table').tBodies[0].replaceChildren()
  $('rate-limits-list').replaceChildren()
  $('finished-chart').replaceChildren()
  $('queued-chart').replaceChildren()
  state.activity = null
  $('counted-at').textContent = ''
  $('kind-names').replaceChildren()
  const kinds = $('filter-kind')
  kinds.replaceChildren(kinds.options[0])
  state.kinds = new Set()
  state.paused = new Set()
  state.job = null
  // The next caller may be another scope: start from its first page, unfiltered.
  state.status = ''
  state.kind = ''
  state.cursors = [null]
  state.countsWanted = true
  $('filter-status').value = ''
  for (const id of ['d-id', 'd-kind', 'd-enqueued', 'd-status', 'd-attempt', 'd-next', 'd-due', 'd-priority', 'd-error', 'd-result', 'action-result', 'pause-result', 'cooldown-result', 'finished-summary', 'queued-summary', 'activity-at']) $(id).textContent = ''
  $('d-log').replaceChildren()
  $('detail-title').textContent = 'Job'
}

/** Shows why the API gave nothing: not authorized (and then no data at all), or unreachable (the last data stays, marked stale). */
function failed(err) {
  if (!(err instanceof ApiError)) {
    console.error(err)
    err = new ApiError('unreachable', 0, null)
  }
  state.problem = err.kind
  const title = $('problem-title')
  const text = $('problem-text')
  if (err.kind === 'unauthenticated' || err.kind === 'forbidden') {
    clearData()
    $('data').hidden = true
    title.textContent = 'Not authorized'
    if (err.kind === 'forbidden') text.textContent = 'The API refused this caller (403 forbidden). Enter another bearer token.'
    else if (memoryToken) text.textContent = 'The API did not accept this bearer token (401). Enter another one.'
    else text.textContent = 'This API needs a bearer token (401). Enter yours to see its jobs.'
    $('token-form').hidden = false
    setConnection('Not authorized', 'unauthorized')
  } else if (err.kind === 'unreachable') {
    $('data').classList.add('stale')
    title.textContent = 'API unreachable'
    text.textContent =
      (err.status === 0 ? 'No answer from ' + API.origin + '.' : 'The API answered ' + err.status + (err.status === 503 ? ' (busy).' : '.')) +
      ' What is shown is from the last answer. ' +
      ($('live').checked ? 'Trying again every ' + REFRESH_MS / 1000 + ' s.' : 'Refresh to try again.')
    $('token-form').hidden = true
    setConnection('Unreachable', 'unreachable')
  } else {
    title.textContent = 'The API refused a request'
    text.textContent = problemText(err)
    $('token-form').hidden = true
    setConnection('Error', 'unreachable')
  }
  $('problem').hidden = false
}

function problemText(err) {
  const code = err.body && err.body.code
  const messages = {
    job_finished: 'The job had already finished; nothing changed.',
    job_not_retryable: 'Only a scheduled, failed or cancelled job can be retried; nothing changed.',
    unique_key_held: 'Another live job of this kind holds the job’s unique key; nothing changed.',
    not_found: 'No such job (it may have been removed).',
    invalid_cursor: 'That page is no longer available.',
    cooldown_not_found: 'That key has no cooldown recorded (it may have just been cleared); nothing changed.',
    invalid_key: 'That is not a key a cooldown can have; nothing changed.',
  }
  if (code && messages[code]) return messages[code]
  if (err.body && typeof err.body.title === 'string') return err.body.title + ' (' + err.status + ').'
  return 'The API answered ' + err.status + '.'
}

// ---- counts, the job list, paused kinds ----

function listPath() {
  const params = new URLSearchParams()
  if (state.status) params.set('status', state.status)
  if (state.kind) params.set('kind', state.kind)
  params.set('limit', String(PAGE_SIZE))
  const cursor = state.cursors[state.cursors.length - 1]
  if (cursor) params.set('cursor', cursor)
  return 'jobs?' + params.toString()
}

async function load() {
  const counting = state.countsWanted || Date.now() - state.countedAt >= COUNTS_MS
  state.countsWanted = false
  try {
    const [stats, page] = await Promise.all([counting ? call('GET', 'stats') : null, call('GET', listPath())])
    if (stats) {
      renderCounts(stats.body.counts)
      state.countedAt = Date.now()
      $('counted-at').textContent = 'as of ' + new Date(state.countedAt).toLocaleTimeString()
    }
    renderJobs(page.body)
    // The chart reads the last hour's finished jobs: as seldom as the counts.
    await Promise.all([loadPaused(), loadSchedules(), loadRateLimits(), counting ? loadActivity() : null])
    renderKindChoices()
    connected()
  } catch (err) {
    if (counting) state.countsWanted = true
    if (err instanceof ApiError && err.kind === 'problem' && err.body && err.body.code === 'invalid_cursor') {
      state.cursors = [null]
      return load()
    }
    failed(err)
  }
}

/**
 * Loads now, unless a load is already on its way (then waits for that one
 * and loads again if asked for new counts). With counts true: count again now,
 * not only every COUNTS_MS.
 */
async function refresh(counts) {
  if (counts) state.countsWanted = true
  while (state.loading !== null) {
    await state.loading
    if (!state.countsWanted) return
  }
  state.loading = load().finally(() => (state.loading = null))
  return state.loading
}

function schedule() {
  clearTimeout(state.timer)
  state.timer = setTimeout(async () => {
    if ($('live').checked && document.visibilityState !== 'hidden') await refresh()
    schedule()
  }, REFRESH_MS)
}

function renderCounts(counts) {
  const byKind = new Map()
  const totals = Object.fromEntries(STATUSES.map((s) => [s, 0]))
  for (const { kind, status, count } of counts) {
    if (!byKind.has(kind)) byKind.set(kind, Object.fromEntries(STATUSES.map((s) => [s, 0])))
    byKind.get(kind)[status] = count
    totals[status] += count
    state.kinds.add(kind)
  }
  const rows = []
  for (const [kind, row] of byKind) rows.push(countRow(kind, row, kind))
  const table = $('counts')
  table.tBodies[0].replaceChildren(...rows)
  if (table.tFoot) table.tFoot.remove()
  if (byKind.size > 1) table.createTFoot().append(countRow('all kinds', totals, ''))
  $('counts-empty').hidden = byKind.size > 0
  table.hidden = byKind.size === 0
}

/** One kind's row: a cell per status (a button that filters the list by it), and for narrow screens one cell listing the statuses it has. */
function countRow(label, row, kind) {
  const tr = el('tr')
  tr.append(el('th', { scope: 'row' }, label))
  const summary = el('td', { className: 'narrow summary' })
  let total = 0
  for (const status of STATUSES) {
    const count = row[status]
    total += count
    const td = el('td', { className: 'num wide-count', 'data-status': status })
    if (count > 0) {
      td.append(filterButton(count, status, kind, label, String(count)))
      summary.append(filterButton(count, status, kind, label, count + ' ' + status))
    } else {
      td.append(el('span', { className: 'zero' }, '0'))
    }
    tr.append(td)
  }
  tr.append(summary, el('td', { className: 'num total' }, total))
  return tr
}

function filterButton(count, status, kind, label, text) {
  const button = el('button', { type: 'button', className: 'link', 'aria-label': 'Show ' + count + ' ' + status + ' jobs of ' + label }, text)
  button.addEventListener('click', () => applyFilters(status, kind))
  return button
}

function renderJobs(page) {
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.job : undefined
  const rows = page.jobs.map((job) => {
    const tr = el('tr', { 'data-id': job.id, 'data-status': job.status, 'aria-current': job.id === state.selected ? 'true' : null })
    const open = el('button', { type: 'button', className: 'link mono', 'data-job': job.id, title: job.id, 'aria-label': 'Open job ' + job.id }, shortId(job.id))
    open.addEventListener('click', () => select(job.id))
    const enqueued = enqueuedAt(job.id)
    tr.append(
      el('td').appendChild(open).parentNode,
      el('td', {}, job.kind),
      el('td').appendChild(statusBadge(job.status)).parentNode,
      el('td', { className: 'wide num' }, job.attempt + '/' + job.maxAttempts),
      el('td', { className: 'wide' }, enqueued !== null ? localTime(enqueued) : '—'),
      el('td', { className: 'wide' }, job.runAt !== null ? localTime(job.runAt) : 'at once'),
    )
    return tr
  })
  $('jobs').tBodies[0].replaceChildren(...rows)
  $('jobs-empty').hidden = rows.length > 0
  state.nextCursor = page.nextCursor
  $('newer').disabled = state.cursors.length <= 1
  $('older').disabled = page.nextCursor === null
  $('page-label').textContent = 'Page ' + state.cursors.length
  // A refresh replaces the rows: keep the keyboard where it was.
  if (focused) {
    const again = document.querySelector('button[data-job="' + CSS.escape(focused) + '"]')
    if (again) again.focus()
  }
}

function renderKindChoices() {
  const kinds = [...new Set([...state.kinds, ...state.paused])].sort()
  const select = $('filter-kind')
  const have = new Set([...select.options].map((o) => o.value))
  for (const kind of kinds) if (!have.has(kind)) select.append(el('option', { value: kind }, kind))
  const sorted = [...select.options].slice(1).sort((a, b) => (a.value < b.value ? -1 : 1))
  select.replaceChildren(select.options[0], ...sorted)
  select.value = state.kind
  $('kind-names').replaceChildren(...kinds.map((k) => el('option', { value: k })))
}

async function loadPaused() {
  try {
    const { body } = await call('GET', 'kinds/paused')
    state.paused = new Set(body.paused.map((p) => p.kind))
    $('paused-note').hidden = true
    $('paused-body').hidden = false
    $('paused-list').replaceChildren(
      ...body.paused.map((p) => {
        const li = el('li')
        const resume = el('button', { type: 'button', 'aria-label': 'Resume ' + p.kind }, 'Resume')
        resume.addEventListener('click', () => pauseAction(p.kind, 'resume'))
        li.append(el('span', { className: 'mono' }, p.kind), el('span', { className: 'since' }, 'since ' + localTime(p.pausedAt)), resume)
        return li
      }),
    )
    $('paused-empty').hidden = body.paused.length > 0
  } catch (err) {
    if (!(err instanceof ApiError) || err.kind !== 'forbidden') throw err
    // Pausing acts on every scope's jobs: only the API's operators may (operatorScope).
    state.paused = new Set()
    $('paused-body').hidden = true
    $('paused-note').hidden = false
    $('paused-note').textContent = 'Pausing and resuming kinds is for operators, and this caller is not one (403), so paused kinds are not shown.'
  }
}

/** A tick's cell: its local date and time to the minute (ticks fall on minutes), its UTC instant on hover, or the word none when there is no tick. */
function tickCell(field, label, ms, none) {
  const text = ms === null ? none : new Date(ms).toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'short' })
  return el('td', { 'data-field': field, 'data-label': label, title: ms === null ? null : new Date(ms).toISOString() }, text)
}

/** The recurring schedules the server's runner declared (never a payload): read by operators only, as paused kinds are. */
async function loadSchedules() {
  try {
    const { body } = await call('GET', 'schedules')
    $('schedules-note').hidden = true
    $('schedules-body').hidden = false
    $('schedules-table').tBodies[0].replaceChildren(
      ...body.schedules.map((s) => {
        const tr = el('tr', { 'data-name': s.name })
        tr.append(
          el('th', { scope: 'row', className: 'mono' }, s.name),
          el('td', { 'data-field': 'kind', 'data-label': 'Kind' }, s.kind),
          el('td', { 'data-field': 'cron', 'data-label': 'Pattern' }).appendChild(el('span', { className: 'mono' }, s.cron)).parentNode,
          el('td', { 'data-field': 'timezone', 'data-label': 'Zone' }, s.timezone),
          tickCell('last', 'Last tick', s.lastTickAt, 'none yet'),
          tickCell('next', 'Next tick', s.nextTickAt, 'none'),
        )
        return tr
      }),
    )
    $('schedules-empty').hidden = body.schedules.length > 0
    $('schedules-table').hidden = body.schedules.length === 0
  } catch (err) {
    if (!(err instanceof ApiError) || err.kind !== 'forbidden') throw err
    // Schedules span every scope: only the API's operators may list them (operatorScope).
    $('schedules-table').tBodies[0].replaceChildren()
    $('schedules-body').hidden = true
    $('schedules-note').hidden = false
    $('schedules-note').textContent = 'Recurring schedules are for operators, and this caller is not one (403), so they are not shown.'
  }
}

// ---- rate limits and cooldowns, and the last hour ----

/** A duration as people say it: 1 min, 1 h, 30 s, 1.5 min, 250 ms. */
function duration(ms) {
  const units = [['d', 86400000], ['h', 3600000], ['min', 60000], ['s', 1000]]
  for (const [unit, size] of units) if (ms >= size && ms % size === 0) return ms / size + ' ' + unit
  for (const [unit, size] of units) if (ms >= size) return Math.round((ms / size) * 10) / 10 + ' ' + unit
  return ms + ' ms'
}

/** An instant as text: its time of day when it is today here, else its date and time. */
function instantText(ms) {
  const at = new Date(ms)
  return at.toDateString() === new Date().toDateString() ? at.toLocaleTimeString() : at.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'short' })
}

/** A labelled value of a rate limit (a dt and its dd); an instant's dd carries it exactly (data-at) and its UTC time on hover. */
function field(name, label, text, attrs) {
  const wrap = el('div')
  wrap.append(el('dt', {}, label), el('dd', Object.assign({ 'data-field': name }, attrs || {}), text))
  return wrap
}

function instantField(name, label, ms, none) {
  return field(name, label, ms === null ? none : instantText(ms), ms === null ? {} : { 'data-at': ms, title: new Date(ms).toISOString() })
}

/**
 * The rate-limited keys and the cooldowns in force, read by operators
 * only (they span every scope): one item per rate limit's key, a
 * per-scope limit's item listing its scopes' cooldowns, and one item per
 * cooldown on a key no rate limit names (a kind without a limit, a key a
 * handler chose).
 */
async function loadRateLimits() {
  try {
    const [limits, cooling] = await Promise.all([call('GET', 'rate-limits'), call('GET', 'cooldowns')])
    const cooldowns = cooling.body.cooldowns
    const shown = new Set()
    const items = limits.body.rateLimits.map((r) => {
      if (r.perScope) {
        // Its buckets are <kind>@<scope>: their cooldowns go under it, each with its own button.
        const scoped = cooldowns.filter((c) => r.kinds.some((kind) => c.key.startsWith(kind + '@')))
        for (const c of scoped) shown.add(c.key)
        return rateItem(r, null, scoped)
      }
      const own = cooldowns.find((c) => c.key === r.key)
      shown.add(r.key)
      return rateItem(r, own ? own.until : r.cooldownUntil, [])
    })
    for (const c of cooldowns) if (!shown.has(c.key)) items.push(cooldownItem(c))
    $('rate-limits-note').hidden = true
    $('rate-limits-body').hidden = false
    $('rate-limits-list').replaceChildren(...items)
    $('rate-limits-empty').hidden = items.length > 0
  } catch (err) {
    if (!(err instanceof ApiError) || err.kind !== 'forbidden') throw err
    $('rate-limits-list').replaceChildren()
    $('rate-limits-body').hidden = true
    $('rate-limits-note').hidden = false
    $('rate-limits-note').textContent = 'Rate limits and cooldowns are for operators, and this caller is not one (403), so they are not shown.'
  }
}

/**
 * One rate limit: its key and kinds, the claims used of its limit in its
 * window (a per-scope limit: its busiest scope's, and its busiest scopes),
 * when the oldest of them leaves the window, and its cooldown (a per-scope
 * limit: its scopes cooling down).
 */
function rateItem(r, cooldownUntil, scoped) {
  const li = el('li', { 'data-key': r.key, 'data-per-scope': r.perScope ? 'true' : null })
  const alone = r.kinds.length === 1 && r.kinds[0] === r.key
  li.append(itemHead(r.key, r.perScope ? 'each scope of ' + r.kinds.join(', ') : alone ? null : 'shared by ' + r.kinds.join(', '), cooldownUntil))
  const fields = el('dl', { className: 'rl-fields' })
  const used = field('used', r.perScope ? 'Used (busiest scope)' : 'Used', r.used + '/' + r.limit + ' per ' + duration(r.periodMs), { 'data-used': r.used, 'data-limit': r.limit, className: r.used >= r.limit ? 'full' : null })
  fields.append(used, instantField('reset', 'Resets', r.resetAt, '—'))
  if (!r.perScope) fields.append(instantField('cooldown', 'Cooldown until', cooldownUntil, 'none'))
  li.append(fields)
  if (r.perScope && r.scopes && r.scopes.length > 0) {
    const busiest = [...r.scopes].sort((a, b) => b.used - a.used || (a.scope < b.scope ? -1 : 1))
    const list = el('ul', { className: 'scopes', 'aria-label': 'Busiest scopes of ' + r.key })
    for (const s of busiest.slice(0, 3)) {
      list.append(el('li', { 'data-scope': s.scope, 'data-used': s.used, title: s.scope === '' ? 'jobs without a scope' : s.scope }, (s.scope === '' ? '(no scope)' : s.scope) + ' ' + s.used + '/' + r.limit))
    }
    if (busiest.length > 3) list.append(el('li', {}, '+' + (busiest.length - 3) + ' more'))
    li.append(list)
  }
  if (scoped.length > 0) {
    const list = el('ul', { className: 'scope-cooldowns', 'aria-label': 'Scopes of ' + r.key + ' cooling down' })
    // The longest first; the CLI lists and clears them all (jobtable cooldowns).
    const longest = [...scoped].sort((a, b) => b.until - a.until)
    for (const c of longest.slice(0, MAX_SCOPE_COOLDOWNS)) {
      const scope = c.key.slice(c.key.indexOf('@') + 1)
      const item = el('li', { 'data-key': c.key })
      item.append(
        el('span', { className: 'rl-scope', title: scope === '' ? 'jobs without a scope' : scope }, scope === '' ? '(no scope)' : scope),
        el('span', {}, ' cooling down until '),
        el('span', { 'data-field': 'cooldown', 'data-at': c.until, title: new Date(c.until).toISOString() }, instantText(c.until)),
        clearButton(c.key),
      )
      list.append(item)
    }
    if (longest.length > MAX_SCOPE_COOLDOWNS) list.append(el('li', { className: 'more' }, '+' + (longest.length - MAX_SCOPE_COOLDOWNS) + ' more scopes cooling down'))
    li.append(list)
  }
  return li
}

/** A cooldown on a key no rate limit names. */
function cooldownItem(c) {
  const li = el('li', { 'data-key': c.key })
  li.append(itemHead(c.key, 'no rate limit', c.until))
  const fields = el('dl', { className: 'rl-fields' })
  fields.append(instantField('cooldown', 'Cooldown until', c.until, 'none'))
  li.append(fields)
  return li
}

/** An item's first line: its key, what draws on it, and a button clearing its cooldown when it has one. */
function itemHead(key, about, cooldownUntil) {
  const head = el('div', { className: 'rl-head' })
  const name = el('div', { className: 'rl-name' })
  name.append(el('span', { className: 'mono' }, key))
  if (about) name.append(el('span', { className: 'sub' }, about))
  head.append(name)
  if (cooldownUntil !== null) head.append(clearButton(key))
  return head
}

function clearButton(key) {
  const button = el('button', { type: 'button', 'data-clear': key, 'aria-label': 'Clear the cooldown of ' + key }, 'Clear')
  button.addEventListener('click', () => clearCooldown(key, button))
  return button
}

async function clearCooldown(key, button) {
  const out = $('cooldown-result')
  button.disabled = true
  out.textContent = 'Clearing the cooldown of ' + key + '…'
  try {
    await call('DELETE', 'cooldowns/' + encodeURIComponent(key))
    out.textContent = 'Cleared the cooldown of ' + key + '.'
  } catch (err) {
    if (err instanceof ApiError && (err.kind === 'problem' || err.kind === 'forbidden')) out.textContent = err.kind === 'forbidden' ? 'Only operators may clear cooldowns (403).' : problemText(err)
    else {
      out.textContent = ''
      failed(err)
      return
    }
  }
  await refresh()
}

/** The last hour's jobs finished per minute and the jobs queued now, by kind: operators only, as they span every scope. */
async function loadActivity() {
  try {
    const { body } = await call('GET', 'activity?minutes=60')
    state.activity = body
    $('activity-note').hidden = true
    $('activity-body').hidden = false
    $('activity-at').textContent = 'as of ' + new Date().toLocaleTimeString()
    drawActivity(true)
  } catch (err) {
    if (!(err instanceof ApiError) || err.kind !== 'forbidden') throw err
    state.activity = null
    $('finished-chart').replaceChildren()
    $('queued-chart').replaceChildren()
    $('activity-body').hidden = true
    $('activity-note').hidden = false
    $('activity-note').textContent = 'The last hour’s activity spans every scope: it is for operators, and this caller is not one (403), so it is not shown.'
  }
}

/** Draws the charts at the width they are shown at: with fresh data, or when that width changed (a resized window). */
function drawActivity(fresh) {
  state.drawing = false
  if (state.activity === null || $('activity-body').hidden) return
  const shown = Math.floor($('finished-chart').parentNode.clientWidth)
  // Not laid out yet (the page's data is shown once the first load is done): drawn then, by connected().
  if (shown === 0) {
    state.drawnWidth = 0
    return
  }
  const width = Math.max(240, shown)
  if (!fresh && width === state.drawnWidth) return
  state.drawnWidth = width
  $('finished-summary').textContent = drawFinished($('finished-chart'), state.activity, width)
  $('queued-summary').textContent = drawQueued($('queued-chart'), state.activity.queued, width)
}

async function pauseAction(kind, action) {
  const result = $('pause-result')
  result.textContent = (action === 'pause' ? 'Pausing ' : 'Resuming ') + kind + '…'
  try {
    const { body } = await call('POST', 'kinds/' + encodeURIComponent(kind) + '/' + action)
    if (action === 'pause') result.textContent = body.changed ? 'Paused ' + kind + ': no worker takes its jobs until it is resumed.' : kind + ' was already paused.'
    else result.textContent = body.changed ? 'Resumed ' + kind + '.' : kind + ' was not paused.'
    await refresh()
  } catch (err) {
    if (err instanceof ApiError && (err.kind === 'problem' || err.kind === 'forbidden')) result.textContent = err.kind === 'forbidden' ? 'Only operators may pause and resume kinds (403).' : problemText(err)
    else failed(err)
  }
}

function applyFilters(status, kind) {
  state.status = status
  state.kind = kind
  $('filter-status').value = status
  renderKindChoices()
  state.cursors = [null]
  return refresh()
}

// ---- one job: its fields, live from its event stream, and its buttons ----

function select(id) {
  if (location.hash === '#job=' + id) openJob(id)
  else location.hash = 'job=' + id
}

function route() {
  const match = JOB_HASH.exec(location.hash)
  if (match) openJob(match[1].toLowerCase())
  else closeJob()
}

function openJob(id) {
  stopWatching()
  state.selected = id
  state.job = null
  $('detail').hidden = false
  $('detail-title').textContent = 'Job ' + shortId(id)
  $('d-log').replaceChildren()
  $('action-result').textContent = ''
  renderJob({ id, kind: '…', status: '', attempt: 0, maxAttempts: 0, result: null, error: null, priority: 0, runAt: null }, true)
  for (const row of $('jobs').tBodies[0].rows) row.toggleAttribute('aria-current', row.dataset.id === id)
  $('detail-title').focus()
  watch(id)
}

function closeJob() {
  const id = state.selected
  stopWatching()
  state.selected = null
  state.job = null
  $('detail').hidden = true
  for (const row of $('jobs').tBodies[0].rows) row.removeAttribute('aria-current')
  const back = id && document.querySelector('button[data-job="' + CSS.escape(id) + '"]')
  if (back) back.focus()
}

function stopWatching() {
  if (state.watching) state.watching.abort()
  state.watching = null
}

/** Follows the job's event stream until its terminal status, reconnecting when the stream ends early. */
async function watch(id) {
  const controller = new AbortController()
  state.watching = controller
  let ended = false
  while (!ended && !controller.signal.aborted) {
    try {
      const response = await call('GET', 'jobs/' + id + '/events', { signal: controller.signal, stream: true })
      await readEvents(response.body, (message) => {
        if (controller.signal.aborted) return
        if (message.event === 'job') {
          const job = JSON.parse(message.data)
          renderJob(job)
          if (TERMINAL.has(job.status)) ended = true
        } else if (message.event === 'error') {
          $('action-result').textContent = 'The job can no longer be read.'
          ended = true
        }
      })
    } catch (err) {
      if (controller.signal.aborted) break
      if (err instanceof ApiError && err.kind === 'problem') {
        $('detail-title').textContent = 'Job ' + shortId(id)
        $('action-result').textContent = problemText(err)
        break
      }
      if (err instanceof ApiError && err.kind !== 'unreachable') {
        failed(err)
        break
      }
      if (err instanceof ApiError) failed(err)
    }
    if (ended || controller.signal.aborted) break
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, RECONNECT_MS)
      controller.signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true })
    })
  }
  if (state.watching === controller) state.watching = null
}

function nextRun(job) {
  if (job.status === 'scheduled') return 'at ' + localTime(job.runAt)
  if (job.status === 'queued') return state.paused.has(job.kind) ? 'once its kind is resumed (paused)' : 'as soon as a worker takes it'
  if (job.status === 'running') return 'running now'
  if (job.status === 'succeeded') return 'not again'
  if (job.status === 'failed' || job.status === 'cancelled') return 'not again, unless retried'
  return '…'
}

function renderJob(job, placeholder) {
  if (job.id !== state.selected) return
  const before = state.job
  if (!placeholder) state.job = job
  const resultText = job.result !== null ? JSON.stringify(job.result, null, 2) : TERMINAL.has(job.status) ? 'none' : 'none yet'
  $('d-id').textContent = job.id
  $('d-kind').textContent = job.kind
  const enqueued = enqueuedAt(job.id)
  $('d-enqueued').textContent = enqueued === null ? '—' : localTime(enqueued)
  const badge = $('d-status')
  badge.textContent = job.status || '…'
  badge.className = 'status status-' + job.status
  $('d-attempt').textContent = placeholder ? '…' : job.attempt + ' of ' + job.maxAttempts
  $('d-next').textContent = nextRun(job)
  $('d-due').textContent = placeholder ? '…' : job.runAt === null ? 'at once (no due time)' : localTime(job.runAt)
  $('d-priority').textContent = placeholder ? '…' : String(job.priority)
  $('d-error').textContent = job.error === null ? '—' : job.error
  const result = $('d-result')
  result.textContent = placeholder ? '…' : resultText
  result.classList.toggle('none', job.result === null)
  $('detail').dataset.status = job.status
  $('cancel').disabled = placeholder || !CANCELLABLE.has(job.status)
  $('retry').disabled = placeholder || !RETRYABLE.has(job.status)
  if (placeholder) return
  const changes = []
  if (!before || before.status !== job.status) changes.push(job.status)
  if (before && JSON.stringify(before.result) !== JSON.stringify(job.result)) changes.push('result updated')
  if (before && before.attempt !== job.attempt) changes.push('attempt ' + job.attempt)
  if (changes.length === 0) return
  const log = $('d-log')
  log.append(el('li', {}, new Date().toLocaleTimeString() + ' · ' + changes.join(', ')))
  while (log.children.length > 50) log.firstElementChild.remove()
}

async function jobAction(action) {
  const id = state.selected
  if (!id) return
  const out = $('action-result')
  const button = $(action)
  button.disabled = true
  out.textContent = action === 'cancel' ? 'Cancelling…' : 'Queueing again…'
  try {
    const { status, body } = await call('POST', 'jobs/' + id + '/' + action)
    if (action === 'cancel') out.textContent = status === 200 ? 'Cancelled.' : 'Cancellation requested: the job ends cancelled when its handler returns.'
    else out.textContent = 'Queued again: it runs when a worker takes it.'
    renderJob(body)
    // A finished job's stream has ended: follow it again through its new attempt.
    if (state.watching === null && state.selected === id) watch(id)
    refresh(true)
  } catch (err) {
    if (err instanceof ApiError && err.kind === 'problem') out.textContent = problemText(err)
    else {
      out.textContent = ''
      failed(err)
    }
    if (state.job) renderJob(state.job)
  }
}

// ---- wiring ----

function start() {
  $('forget-token').hidden = !memoryToken
  $('token-form').addEventListener('submit', (event) => {
    event.preventDefault()
    const input = $('token')
    const token = input.value.trim()
    if (!token) return
    storeToken(token)
    input.value = ''
    refresh(true)
  })
  $('forget-token').addEventListener('click', () => {
    storeToken(null)
    refresh(true)
  })
  $('refresh').addEventListener('click', () => refresh(true))
  $('live').addEventListener('change', () => refresh())
  $('filters').addEventListener('submit', (event) => event.preventDefault())
  $('filter-status').addEventListener('change', (event) => applyFilters(event.target.value, state.kind))
  $('filter-kind').addEventListener('change', (event) => applyFilters(state.status, event.target.value))
  $('clear-filters').addEventListener('click', () => applyFilters('', ''))
  $('older').addEventListener('click', () => {
    if (state.nextCursor === null) return
    state.cursors.push(state.nextCursor)
    refresh()
  })
  $('newer').addEventListener('click', () => {
    if (state.cursors.length > 1) state.cursors.pop()
    refresh()
  })
  $('cancel').addEventListener('click', () => jobAction('cancel'))
  $('retry').addEventListener('click', () => jobAction('retry'))
  $('close-detail').addEventListener('click', () => {
    history.pushState(null, '', location.pathname + location.search)
    route()
  })
  $('detail').addEventListener('keydown', (event) => {
    if (event.key === 'Escape') $('close-detail').click()
  })
  $('pause-form').addEventListener('submit', (event) => {
    event.preventDefault()
    const kind = $('pause-kind').value.trim()
    if (kind) pauseAction(kind, 'pause').then(() => ($('pause-kind').value = ''))
  })
  window.addEventListener('hashchange', route)
  window.addEventListener('resize', () => {
    if (state.drawing) return
    state.drawing = true
    requestAnimationFrame(() => drawActivity(false))
  })
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible' && $('live').checked) refresh()
  })
  route()
  refresh()
  schedule()
}

start()
`
