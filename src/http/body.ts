import { problem } from './problem.js'

/** A request body read as JSON, or the problem response that refuses it. */
export type JsonBody = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly response: Response }

/**
 * Reads a request body as JSON, refusing a body over `limit` bytes without
 * reading it all: a declared Content-Length over the limit is refused
 * before the first byte is read, and a body without one (chunked) is
 * counted as it streams and cancelled at the first byte over. The parser's
 * message is dropped: it can quote the body.
 */
export async function readJsonBody(request: Request, limit: number): Promise<JsonBody> {
  if (!isJson(request.headers.get('content-type'))) return refuse(problem('unsupported_media_type'))
  const encoding = request.headers.get('content-encoding')
  if (encoding !== null && encoding.trim().toLowerCase() !== 'identity') {
    return refuse(problem('unsupported_media_type', { detail: 'compressed request bodies are not accepted' }))
  }
  const declared = request.headers.get('content-length')
  if (declared !== null && Number(declared) > limit) return refuse(tooLarge(limit))
  const bytes = await readAtMost(request.body, limit)
  if (bytes === undefined) return refuse(tooLarge(limit))
  let value: unknown
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes))
  } catch {
    return refuse(problem('malformed_json'))
  }
  return { ok: true, value }
}

/** The body's bytes, or undefined as soon as more than `limit` have arrived. */
async function readAtMost(body: ReadableStream<Uint8Array> | null, limit: number): Promise<Uint8Array | undefined> {
  if (body === null) return new Uint8Array(0)
  const reader = body.getReader()
  const chunks: Uint8Array[] = []
  let total = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    total += value.byteLength
    if (total > limit) {
      // Stop reading here; the server drains or closes the connection.
      await reader.cancel().catch(() => undefined)
      return undefined
    }
    chunks.push(value)
  }
  const bytes = new Uint8Array(total)
  let at = 0
  for (const chunk of chunks) {
    bytes.set(chunk, at)
    at += chunk.byteLength
  }
  return bytes
}

/**
 * Whether a Content-Type names JSON in UTF-8: `application/json`, with no
 * charset or `charset=utf-8` (JSON is UTF-8, RFC 8259; a body declared in
 * another charset would be read as UTF-8 anyway, and so changed).
 */
function isJson(contentType: string | null): boolean {
  if (contentType === null) return false
  const [media, ...params] = contentType.split(';')
  if (media?.trim().toLowerCase() !== 'application/json') return false
  for (const param of params) {
    const [name, value = ''] = param.split('=')
    if (name?.trim().toLowerCase() !== 'charset') continue
    if (value.trim().replace(/^"(.*)"$/, '$1').toLowerCase() !== 'utf-8') return false
  }
  return true
}

function tooLarge(limit: number): Response {
  // No Connection: close here (HTTP/2 forbids it); the Node adapter drains
  // a bounded amount of the unread body, then closes the connection.
  return problem('payload_too_large', { detail: `the limit is ${limit} bytes` })
}

function refuse(response: Response): JsonBody {
  return { ok: false, response }
}
