/**
 * The dashboard's charts (served as `<basePath>/dashboard/chart.js`), an
 * ES module for the browser that app.js imports: the last hour's jobs
 * finished per minute by status (stacked bars) and the jobs queued now by
 * kind (one bar each), drawn as inline SVG. No chart library: two bar
 * charts are a few dozen lines, and a library would be a dependency and
 * a download for no gain.
 *
 * Each chart is drawn at the pixel width it is shown at (the viewBox is
 * its size in CSS pixels), so its text keeps the page's size on a phone
 * as on a desktop instead of shrinking with the drawing. Every value
 * reaches the SVG as an attribute or as text (textContent), never as
 * markup. Colours come from the style sheet's classes (the page's policy
 * allows no inline style); each bar carries its status, count and minute
 * as data attributes, and a title, so it is told by more than its colour.
 *
 * Kept as a string, as app.js is; plain JavaScript with no template
 * literals.
 */
export const CHART_JS = String.raw`// The jobtable dashboard's charts: see src/dashboard/chart-js.ts.
const FINISHED = ['succeeded', 'failed', 'cancelled']
const MINUTE = 60000
const FINISHED_HEIGHT = 180
const QUEUED_ROW = 26
const QUEUED_MAX_ROWS = 8
/** About how wide a time label is at the chart's 12 px ("12:45 PM"). */
const TIME_LABEL_PX = 60

/** Makes an SVG element in the namespace of the chart it goes into; values are attributes or text, never markup. */
function part(chart, tag, attrs, text) {
  const node = document.createElementNS(chart.namespaceURI, tag)
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(name, String(value))
  }
  if (text !== undefined && text !== null) node.textContent = String(text)
  return node
}

function px(n) {
  return Math.round(n * 10) / 10
}

function count(n) {
  return n.toLocaleString()
}

function hhmm(ms) {
  return new Date(ms).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' })
}

function size(chart, width, height) {
  chart.setAttribute('width', String(width))
  chart.setAttribute('height', String(height))
  chart.setAttribute('viewBox', '0 0 ' + width + ' ' + height)
}

/** A round top for an axis: 1, 2 or 5 times a power of ten, at least max (and at least 1). */
export function niceMax(max) {
  if (!(max > 1)) return 1
  const power = Math.pow(10, Math.floor(Math.log10(max)))
  for (const m of [1, 2, 5]) if (m * power >= max) return m * power
  return 10 * power
}

/**
 * The activity's minutes as slots from its start, each with its count per
 * status: as many as the window's minutes, or more if the server counted
 * a later minute (the current one).
 */
export function minuteSlots(activity) {
  let slots = activity.minutes
  for (const f of activity.finished) slots = Math.max(slots, Math.floor((f.minute - activity.since) / MINUTE) + 1)
  const out = Array.from({ length: slots }, (_, i) => ({ minute: activity.since + i * MINUTE, counts: { succeeded: 0, failed: 0, cancelled: 0 }, total: 0 }))
  const totals = { succeeded: 0, failed: 0, cancelled: 0 }
  for (const f of activity.finished) {
    const slot = out[Math.floor((f.minute - activity.since) / MINUTE)]
    if (slot === undefined || !FINISHED.includes(f.status)) continue
    slot.counts[f.status] += f.count
    slot.total += f.count
    totals[f.status] += f.count
  }
  return { slots: out, totals }
}

/**
 * Draws the jobs finished per minute into the svg element chart, width CSS
 * pixels wide: one stacked bar per minute with any, a grid with its
 * counts, and the time every quarter of the window. Returns a sentence
 * saying what it shows, for the text beside it (and screen readers).
 */
export function drawFinished(chart, activity, width) {
  const { slots, totals } = minuteSlots(activity)
  const left = 44
  const right = 10
  const top = 10
  const bottom = 24
  const plotW = Math.max(1, width - left - right)
  const plotH = FINISHED_HEIGHT - top - bottom
  const max = niceMax(Math.max(0, ...slots.map((s) => s.total)))
  size(chart, width, FINISHED_HEIGHT)
  const parts = []
  for (const value of [0, max / 2, max]) {
    if (value !== Math.round(value)) continue
    const y = px(top + plotH - (value / max) * plotH)
    parts.push(part(chart, 'line', { class: 'grid', x1: left, x2: left + plotW, y1: y, y2: y }))
    parts.push(part(chart, 'text', { class: 'axis', x: left - 6, y: y + 4, 'text-anchor': 'end' }, count(value)))
  }
  const step = plotW / slots.length
  const barW = px(Math.max(1, step > 4 ? step - 1 : step))
  slots.forEach((slot, i) => {
    if (slot.total === 0) return
    const said = FINISHED.filter((s) => slot.counts[s] > 0).map((s) => count(slot.counts[s]) + ' ' + s)
    const bar = part(chart, 'g', { class: 'minute', 'data-minute': slot.minute, 'data-total': slot.total })
    bar.append(part(chart, 'title', {}, hhmm(slot.minute) + ': ' + said.join(', ')))
    let y = top + plotH
    for (const status of FINISHED) {
      const n = slot.counts[status]
      if (n === 0) continue
      // At least a pixel, so a minute with one failure among thousands still shows it.
      const h = Math.max(1, (n / max) * plotH)
      y -= h
      bar.append(part(chart, 'rect', { class: 'bar bar-' + status, 'data-status': status, 'data-count': n, x: px(left + i * step), y: px(y), width: barW, height: px(h) }))
    }
    parts.push(bar)
  })
  // Times on the clock's round minutes, as many as fit without touching: every 5, 10, 15, 20, 30 or 60 minutes...
  const fit = Math.max(2, Math.floor(plotW / (TIME_LABEL_PX + 16)))
  const every = [5, 10, 15, 20, 30, 60, 120, 240, 360, 720, 1440].find((m) => slots.length / m <= fit - 1) || 1440
  for (let i = 0; i <= slots.length; i++) {
    const at = new Date(activity.since + i * MINUTE)
    if ((at.getHours() * 60 + at.getMinutes()) % every !== 0) continue
    const x = px(left + i * step)
    // ...each centred on its minute, but kept within the drawing at either end.
    const anchor = x + TIME_LABEL_PX / 2 > width ? 'end' : 'middle'
    parts.push(part(chart, 'line', { class: 'tick', x1: x, x2: x, y1: top + plotH, y2: top + plotH + 4 }))
    parts.push(part(chart, 'text', { class: 'axis time', x, y: FINISHED_HEIGHT - 6, 'text-anchor': anchor, 'data-minute': at.getTime() }, hhmm(at.getTime())))
  }
  chart.replaceChildren(...parts)
  const total = totals.succeeded + totals.failed + totals.cancelled
  if (total === 0) return 'No job finished in the last ' + slots.length + ' minutes.'
  return 'In the last ' + slots.length + ' minutes: ' + FINISHED.map((s) => count(totals[s]) + ' ' + s).join(', ') + '.'
}

/**
 * Draws the jobs queued now by kind into the svg element chart, width CSS
 * pixels wide: one bar per kind, most queued first, the kind's name
 * before it (shortened to fit, whole in its title) and its count after.
 * Returns a sentence saying what it shows; with nothing queued the chart
 * is empty and hidden.
 */
export function drawQueued(chart, queued, width) {
  const kinds = [...queued].filter((q) => q.count > 0).sort((a, b) => b.count - a.count || (a.kind < b.kind ? -1 : 1))
  const shown = kinds.slice(0, QUEUED_MAX_ROWS)
  const total = kinds.reduce((sum, q) => sum + q.count, 0)
  chart.toggleAttribute('hidden', shown.length === 0)
  const labelW = Math.min(180, Math.round(width * 0.38))
  const countW = 64
  const barRoom = Math.max(1, width - labelW - countW)
  const max = Math.max(1, ...shown.map((q) => q.count))
  // About 7.5 px a character at the chart's 12 px: a longer name is cut, whole in its title.
  const chars = Math.max(4, Math.floor((labelW - 10) / 7.5))
  size(chart, width, Math.max(1, shown.length * QUEUED_ROW))
  chart.replaceChildren(
    ...shown.map((q, i) => {
      const y = i * QUEUED_ROW
      const row = part(chart, 'g', { class: 'kind', 'data-kind': q.kind, 'data-count': q.count })
      const name = q.kind.length > chars ? q.kind.slice(0, chars - 1) + '…' : q.kind
      const w = Math.max(1, (q.count / max) * barRoom)
      row.append(
        part(chart, 'title', {}, q.kind + ': ' + count(q.count) + ' queued'),
        part(chart, 'text', { class: 'label', x: labelW - 8, y: y + 17, 'text-anchor': 'end' }, name),
        part(chart, 'rect', { class: 'bar bar-queued', x: labelW, y: y + 5, width: px(w), height: QUEUED_ROW - 10 }),
        part(chart, 'text', { class: 'axis', x: px(labelW + w + 6), y: y + 17 }, count(q.count)),
      )
      return row
    }),
  )
  if (kinds.length === 0) return 'Nothing is queued.'
  const of = count(total) + ' queued, of ' + kinds.length + (kinds.length === 1 ? ' kind' : ' kinds')
  return kinds.length > shown.length ? of + ' (the ' + shown.length + ' with the most shown).' : of + '.'
}
`
