/** Whether `host` is a loopback address: 127.0.0.0/8, ::1 or localhost. Anything else, including 0.0.0.0 and ::, is public. */
export function isLoopback(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, '$1')
  if (h === 'localhost' || h === '::1' || h === '0:0:0:0:0:0:0:1') return true
  const v4 = h.startsWith('::ffff:') ? h.slice(7) : h
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4)
}
