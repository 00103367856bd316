/**
 * The dashboard's Server-Sent Events reader (served as
 * `<basePath>/dashboard/sse.js`), an ES module for the browser. The page
 * reads a job's event stream with fetch(), not EventSource, because
 * EventSource cannot send the Authorization header. It parses the stream
 * as the HTML standard's event-stream format says: lines ended by CRLF,
 * LF or CR (a CR at the end of a chunk waits for the next one, in case an
 * LF follows), `:` comments, `data` lines joined with LF, and an event
 * dispatched at each blank line when it has data.
 *
 * Kept as a string so it ships in the built package as it is; plain
 * JavaScript with no template literals, which this string could not hold.
 */
export const SSE_JS = String.raw`// Server-Sent Events over fetch(): see src/dashboard/sse-js.ts.

/** Feeds text in, calls onEvent({ event, data, id }) for each complete event. */
export class EventParser {
  constructor(onEvent) {
    this.onEvent = onEvent
    this.rest = ''
    this.event = ''
    this.data = []
    this.id = ''
  }

  push(text) {
    let buffer = this.rest + text
    let held = ''
    // A CR at the end may be the first half of a CRLF: keep it for the next chunk.
    if (buffer.endsWith('\r')) {
      held = '\r'
      buffer = buffer.slice(0, -1)
    }
    const lines = buffer.split(/\r\n|\r|\n/)
    this.rest = lines.pop() + held
    for (const line of lines) this.line(line)
  }

  /** The stream has ended: a CR held back from the last chunk ends its line after all. */
  finish() {
    if (this.rest.endsWith('\r')) this.line(this.rest.slice(0, -1))
    this.rest = ''
  }

  line(line) {
    if (line === '') {
      if (this.data.length > 0) this.onEvent({ event: this.event || 'message', data: this.data.join('\n'), id: this.id })
      this.event = ''
      this.data = []
      return
    }
    if (line.startsWith(':')) return
    const colon = line.indexOf(':')
    const field = colon === -1 ? line : line.slice(0, colon)
    let value = colon === -1 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (field === 'event') this.event = value
    else if (field === 'data') this.data.push(value)
    else if (field === 'id' && !value.includes('\0')) this.id = value
    // retry: ignored; the page decides when to reconnect.
  }
}

/** Reads a response body to its end, calling onEvent for each event; rejects when the read fails or is aborted. */
export async function readEvents(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader()
  const parser = new EventParser(onEvent)
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return parser.finish()
    parser.push(value)
  }
}
`
