/**
 * klog's text line shape, for tests that read edgeproxy's stderr.
 */

/**
 * klog's own pattern for its header (k8s.io/klog/v2 test/output.go strips headers with
 * `(?m)^(.).... ..:..:......... ....... output.go`), with a file name in place of output.go.
 */
export function klogTestRegex(file: string): RegExp {
  return new RegExp(`^(.).... ..:..:......... ....... ${file.replace(/\./g, "\\.")}:`);
}

/**
 * The header layout of klog's FormatHeader, `Lmmdd hh:mm:ss.uuuuuu threadid file:line] `, then the body.
 * Groups: 1 severity, 2 month, 3 day, 4-6 h/m/s, 7 microseconds, 8 pid (space-padded), 9 file, 10 line,
 * 11 body.
 */
export const KLOG_HEADER =
  /^([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) ([ \d]{7}) ([^ :\]]+):(\d+)\] (.*)$/;
