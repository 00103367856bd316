/** Whether `host` is a loopback address: 127.0.0.0/8, ::1 or localhost. Anything else, including 0.0.0.0 and ::, is public. */
export function isLoopback(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, '$1')
  if (h === 'localhost' || h === '::1' || h === '0:0:0:0:0:0:0:1') return true
  const v4 = h.startsWith('::ffff:') ? h.slice(7) : h
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4)
}

/** Whether a Host header names a host allowed: any, a loopback name, or one of those listed (its port ignored). */
export function hostAllowed(host: string | undefined, allowed: 'any' | 'loopback' | readonly string[]): boolean {
  if (allowed === 'any') return true
  if (host === undefined) return false
  // The name without its port: [::1]:8080 → [::1], localhost:8080 → localhost.
  const name = host.trim().toLowerCase().replace(/:\d+$/, '')
  if (allowed === 'loopback') return isLoopback(name)
  return allowed.some((a) => a.toLowerCase() === name)
}
