import { randomBytes } from 'node:crypto'

/**
 * A secret marker and the search for it. The marker is fresh per run, so
 * nothing left by an earlier run can be mistaken for a leak, and holds a
 * `+` and a `/` so its URL-encoded, base64 and hex forms each differ
 * from the raw text. The random core is searched on its own too, so a
 * marker cut short (a stack trimmed to a width) is still found.
 */
export interface Marker {
  readonly text: string
  readonly core: string
}

/** A new marker, e.g. `sk+LEAK/3f9a…`. */
export function newMarker(label = 'LEAK'): Marker {
  const core = randomBytes(12).toString('hex')
  return { text: `sk+${label}/${core}`, core }
}

/**
 * The forms a leaked string can take: raw, base64 and base64url at each
 * of the three alignments it can sit at inside a longer encoded text
 * (only the characters that depend on its bytes alone), hex in either
 * case, and percent-encoded in either case.
 */
export function needles(value: string): Map<string, string> {
  const bytes = Buffer.from(value, 'utf8')
  const forms = new Map<string, string>([['raw', value]])
  for (let pad = 0; pad < 3; pad++) {
    const encoded = Buffer.concat([Buffer.alloc(pad), bytes]).toString('base64')
    const stable = encoded.slice(Math.ceil((8 * pad) / 6), Math.floor((8 * (pad + bytes.length)) / 6))
    forms.set(`base64@${pad}`, stable)
    forms.set(`base64url@${pad}`, stable.replaceAll('+', '-').replaceAll('/', '_'))
  }
  forms.set('hex', bytes.toString('hex'))
  forms.set('HEX', bytes.toString('hex').toUpperCase())
  const percent = encodeURIComponent(value)
  forms.set('url', percent)
  forms.set('url-lower', percent.replace(/%[0-9A-F]{2}/g, (p) => p.toLowerCase()))
  forms.set('form', new URLSearchParams({ v: value }).toString().slice(2))
  return forms
}

/** Each form of the marker (or of its core) found in text, with its count; empty when none is. */
export function findMarker(text: string, marker: Marker): Record<string, number> {
  const found: Record<string, number> = {}
  for (const [subject, value] of [['marker', marker.text], ['core', marker.core]] as const) {
    for (const [form, needle] of needles(value)) {
      const n = count(text, needle)
      if (n > 0) found[`${subject}:${form}`] = n
    }
  }
  return found
}

function count(text: string, needle: string): number {
  let n = 0
  for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + 1)) n++
  return n
}

/** Every way a leaked marker could be written down, for the search's own check. */
export function encodings(value: string): string[] {
  const bytes = Buffer.from(value, 'utf8')
  return [
    value,
    bytes.toString('base64'),
    bytes.toString('base64url'),
    bytes.toString('hex'),
    bytes.toString('hex').toUpperCase(),
    encodeURIComponent(value),
    new URLSearchParams({ v: value }).toString(),
  ]
}

/** Up to `max` snippets of text around each raw occurrence of the marker's core, the marker shown as <MARKER>, to say where a leak is. */
export function whereFound(text: string, marker: Marker, max = 5): string[] {
  const snippets: string[] = []
  for (let at = text.indexOf(marker.core); at >= 0 && snippets.length < max; at = text.indexOf(marker.core, at + 1)) {
    snippets.push(text.slice(Math.max(0, at - 120), at + 80).replaceAll(marker.text, '<MARKER>').replaceAll(marker.core, '<CORE>'))
  }
  return snippets
}
