;; response-header: an example Isobar WebAssembly processor (ABI v1).
;;
;; For every vhost whose fqdn ends with `config.fqdn-suffix` (ASCII
;; case-insensitive; an empty or absent suffix selects every vhost), emit one
;; change that sets the response header `config.name` to `config.value`.
;;
;; ---------------------------------------------------------------------------
;; ABI v1 (host: wasmtime with fuel and memory limits; no imports allowed)
;; ---------------------------------------------------------------------------
;;   memory                                  exported linear memory
;;   isobar_abi_version () -> i32            always 1
;;   isobar_alloc (len) -> ptr               `len` writable bytes; the host
;;                                           copies the input JSON there
;;   isobar_process (ptr, len) -> i64        reads the input JSON at ptr/len,
;;                                           returns (out_ptr << 32) | out_len
;;
;; The host calls isobar_alloc then isobar_process once, on a fresh instance,
;; so memory is a bump allocator that never frees.  Memory grows on demand.
;;
;; Input (compact serde_json; key order abi, config, vhosts):
;;   {"abi":1,"config":{"fqdn-suffix":".example.com","name":"x-h","value":"v"},
;;    "vhosts":[{"fqdn":"a.example.com","tls":true,"routes":[...]}, ...]}
;;
;; Output:
;;   {"changes":[{"vhost":"a.example.com",
;;                "response-headers-set":{"x-h":"v"}}, ...],
;;    "conditions":[]}
;;
;; If config.name is absent (or empty, or not a string) no changes are emitted
;; and the output carries {"message":"config.name is required"}; likewise
;; {"message":"config.value is required"} if config.value is absent or not a
;; string (an empty value "" is allowed).
;;
;; ---------------------------------------------------------------------------
;; Algorithm
;; ---------------------------------------------------------------------------
;; This is not a full JSON parser, but it walks the structure honestly rather
;; than searching for substrings, so text such as "vhosts": or "fqdn":"
;; inside a string value, or a "name" key inside a nested object, cannot
;; confuse it:
;;
;;   * $skip_string skips a string token (a backslash always escapes the next
;;     byte, so the string ends at the first quote not preceded by an odd
;;     number of backslashes).
;;   * $skip_value skips any value: strings, objects/arrays (tracking brace
;;     depth and skipping nested strings), and scalars.
;;   * $find_member walks the top-level members of one object and returns
;;     where the value for a given key starts.
;;
;; Strings are never decoded: the raw bytes between the quotes (escapes
;; included) are copied to the output, so the output is valid JSON and means
;; the same thing as the input.  Keys are compared raw, so a key spelled with
;; \u escapes is not recognised (serde_json never writes one).
;;
;; Whitespace between tokens is tolerated although serde_json never writes
;; any.  Malformed input traps (`unreachable`); the host reports the trap.
;;
;; Memory layout:
;;   0x000 - 0x3ff   constant strings (data segments below)
;;   0x400 -         heap: the input (isobar_alloc), then the output buffer,
;;                   which grows in place as bytes are appended.
(module
  (memory (export "memory") 1)

  ;; Next free byte of the bump allocator.
  (global $heap (mut i32) (i32.const 0x400))
  ;; One past the last byte of the input being processed.
  (global $in_end (mut i32) (i32.const 0))
  ;; Write cursor of the output buffer (always the last thing on the heap).
  (global $out (mut i32) (i32.const 0))

  ;; -------------------------------------------------------------------------
  ;; Constant strings: address, length and contents.
  ;; -------------------------------------------------------------------------
  ;; keys we look up (raw contents, without quotes)
  (data (i32.const 0x000) "config")                      ;; len 6
  (data (i32.const 0x010) "vhosts")                      ;; len 6
  (data (i32.const 0x020) "fqdn")                        ;; len 4
  (data (i32.const 0x030) "fqdn-suffix")                 ;; len 11
  (data (i32.const 0x040) "name")                        ;; len 4
  (data (i32.const 0x050) "value")                       ;; len 5
  ;; output fragments
  (data (i32.const 0x060) "{\"changes\":[")              ;; len 12
  (data (i32.const 0x080) "],\"conditions\":[")          ;; len 16
  (data (i32.const 0x0a0) "]}")                          ;; len 2
  (data (i32.const 0x0b0) "{\"vhost\":\"")               ;; len 10
  (data (i32.const 0x0c0) "\",\"response-headers-set\":{\"") ;; len 27
  (data (i32.const 0x0e0) "\":\"")                       ;; len 3
  (data (i32.const 0x0f0) "\"}}")                        ;; len 3
  (data (i32.const 0x100) "{\"message\":\"config.name is required\"}")  ;; len 37
  (data (i32.const 0x140) "{\"message\":\"config.value is required\"}") ;; len 38
  (data (i32.const 0x180) ",")                           ;; len 1

  ;; -------------------------------------------------------------------------
  ;; Exports
  ;; -------------------------------------------------------------------------

  (func (export "isobar_abi_version") (result i32)
    (i32.const 1))

  ;; Bump-allocate `len` bytes (8-byte aligned), growing memory if needed.
  (func $alloc (export "isobar_alloc") (param $len i32) (result i32)
    (local $p i32)
    (local.set $p
      (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
    (global.set $heap (i32.add (local.get $p) (local.get $len)))
    ;; a huge `len` would wrap around the 32-bit address space
    (if (i32.lt_u (global.get $heap) (local.get $p)) (then (call $fail)))
    (call $ensure (global.get $heap))
    (local.get $p))

  (func (export "isobar_process") (param $ptr i32) (param $len i32) (result i64)
    (local $root i32)        ;; start of the top-level object
    (local $cfg i32)         ;; start of the config value, or -1
    (local $list i32)        ;; start of the vhosts value, or -1
    (local $p i32)           ;; cursor in the vhosts array
    (local $c i32)
    (local $out_start i32)
    (local $suffix_ptr i32) (local $suffix_len i32)
    (local $name_ptr i32)   (local $name_len i32)
    (local $value_ptr i32)  (local $value_len i32)
    (local $fqdn_ptr i32)   (local $fqdn_len i32)
    (local $missing i32)     ;; bit 0: name missing, bit 1: value missing
    (local $emitted i32)     ;; number of changes written so far

    (global.set $in_end (i32.add (local.get $ptr) (local.get $len)))
    (if (i32.lt_u (global.get $in_end) (local.get $ptr)) (then (call $fail)))

    ;; The output buffer starts on the heap, after the input.
    (local.set $out_start
      (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
    (global.set $out (local.get $out_start))

    (local.set $root (call $skip_ws (local.get $ptr)))
    (if (i32.ne (call $byte (local.get $root)) (i32.const 123 (; { ;)))
      (then (call $fail)))

    ;; --- read the config ---------------------------------------------------
    ;; Absent or non-object config (e.g. null) counts as an empty config.
    (local.set $suffix_ptr (i32.const -1))
    (local.set $name_ptr (i32.const -1))
    (local.set $value_ptr (i32.const -1))
    (local.set $cfg
      (call $find_member (local.get $root) (i32.const 0x000) (i32.const 6)))
    (if (i32.and
          (i32.ne (local.get $cfg) (i32.const -1))
          (i32.eq (call $byte (local.get $cfg)) (i32.const 123 (; { ;))))
      (then
        (call $string_member (local.get $cfg) (i32.const 0x030) (i32.const 11))
        (local.set $suffix_len) (local.set $suffix_ptr)
        (call $string_member (local.get $cfg) (i32.const 0x040) (i32.const 4))
        (local.set $name_len) (local.set $name_ptr)
        (call $string_member (local.get $cfg) (i32.const 0x050) (i32.const 5))
        (local.set $value_len) (local.set $value_ptr)))

    ;; An absent suffix behaves like an empty one: it matches everything.
    (if (i32.eq (local.get $suffix_ptr) (i32.const -1))
      (then (local.set $suffix_len (i32.const 0))))
    (if (i32.or (i32.eq (local.get $name_ptr) (i32.const -1))
                (i32.eqz (local.get $name_len)))
      (then (local.set $missing (i32.or (local.get $missing) (i32.const 1)))))
    (if (i32.eq (local.get $value_ptr) (i32.const -1))
      (then (local.set $missing (i32.or (local.get $missing) (i32.const 2)))))

    ;; --- changes -----------------------------------------------------------
    (call $emit (i32.const 0x060) (i32.const 12))            ;; {"changes":[
    (if (i32.eqz (local.get $missing))
      (then
        ;; Found by walking the top-level members, i.e. after the whole
        ;; config value has been skipped.  Absent or null: no vhosts.
        (local.set $list
          (call $find_member (local.get $root) (i32.const 0x010) (i32.const 6)))
        (if (i32.and
              (i32.ne (local.get $list) (i32.const -1))
              (i32.eq (call $byte (local.get $list)) (i32.const 91 (; [ ;))))
          (then
            (local.set $p
              (call $skip_ws (i32.add (local.get $list) (i32.const 1))))
            (if (i32.ne (call $byte (local.get $p)) (i32.const 93 (; ] ;)))
              (then
                (loop $next_vhost
                  ;; $p is at the start of one array element
                  (if (i32.eq (call $byte (local.get $p)) (i32.const 123 (; { ;)))
                    (then
                      (call $string_member (local.get $p) (i32.const 0x020) (i32.const 4))
                      (local.set $fqdn_len) (local.set $fqdn_ptr)
                      (if (i32.and
                            (i32.ne (local.get $fqdn_ptr) (i32.const -1))
                            (call $ends_with_ci
                              (local.get $fqdn_ptr) (local.get $fqdn_len)
                              (local.get $suffix_ptr) (local.get $suffix_len)))
                        (then
                          (if (local.get $emitted)
                            (then (call $emit (i32.const 0x180) (i32.const 1))))
                          (call $emit_change
                            (local.get $fqdn_ptr) (local.get $fqdn_len)
                            (local.get $name_ptr) (local.get $name_len)
                            (local.get $value_ptr) (local.get $value_len))
                          (local.set $emitted
                            (i32.add (local.get $emitted) (i32.const 1)))))))
                  ;; move past the element, then expect `,` or `]`
                  (local.set $p
                    (call $skip_ws (call $skip_value (local.get $p))))
                  (local.set $c (call $byte (local.get $p)))
                  (if (i32.eq (local.get $c) (i32.const 44 (; , ;)))
                    (then
                      (local.set $p
                        (call $skip_ws (i32.add (local.get $p) (i32.const 1))))
                      (br $next_vhost)))
                  (if (i32.ne (local.get $c) (i32.const 93 (; ] ;)))
                    (then (call $fail))))))))))

    ;; --- conditions --------------------------------------------------------
    (call $emit (i32.const 0x080) (i32.const 16))            ;; ],"conditions":[
    (if (i32.and (local.get $missing) (i32.const 1))
      (then (call $emit (i32.const 0x100) (i32.const 37))))
    (if (i32.and (local.get $missing) (i32.const 2))
      (then
        (if (i32.and (local.get $missing) (i32.const 1))
          (then (call $emit (i32.const 0x180) (i32.const 1))))
        (call $emit (i32.const 0x140) (i32.const 38))))
    (call $emit (i32.const 0x0a0) (i32.const 2))             ;; ]}

    ;; The output now belongs to the heap.
    (global.set $heap (global.get $out))

    ;; (out_ptr << 32) | out_len, both halves unsigned
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $out_start)) (i64.const 32))
      (i64.extend_i32_u
        (i32.sub (global.get $out) (local.get $out_start)))))

  ;; -------------------------------------------------------------------------
  ;; Memory and output helpers
  ;; -------------------------------------------------------------------------

  ;; Malformed input or exhausted memory: trap.
  (func $fail
    (unreachable))

  ;; Grow memory so that addresses below `end` are valid.
  (func $ensure (param $end i32)
    (local $have i64)
    (local $need i64)
    (local.set $have (i64.shl (i64.extend_i32_u (memory.size)) (i64.const 16)))
    (local.set $need (i64.extend_i32_u (local.get $end)))
    (if (i64.gt_u (local.get $need) (local.get $have))
      (then
        (if (i32.eq
              (memory.grow
                (i32.wrap_i64
                  (i64.shr_u
                    (i64.add (i64.sub (local.get $need) (local.get $have))
                             (i64.const 0xffff))
                    (i64.const 16))))
              (i32.const -1))
          (then (call $fail))))))

  ;; Append `len` bytes from `src` to the output buffer.
  (func $emit (param $src i32) (param $len i32)
    (call $ensure (i32.add (global.get $out) (local.get $len)))
    (memory.copy (global.get $out) (local.get $src) (local.get $len))
    (global.set $out (i32.add (global.get $out) (local.get $len))))

  ;; Append {"vhost":"<fqdn>","response-headers-set":{"<name>":"<value>"}}
  (func $emit_change
    (param $fqdn i32) (param $fqdn_len i32)
    (param $name i32) (param $name_len i32)
    (param $value i32) (param $value_len i32)
    (call $emit (i32.const 0x0b0) (i32.const 10))    ;; {"vhost":"
    (call $emit (local.get $fqdn) (local.get $fqdn_len))
    (call $emit (i32.const 0x0c0) (i32.const 27))    ;; ","response-headers-set":{"
    (call $emit (local.get $name) (local.get $name_len))
    (call $emit (i32.const 0x0e0) (i32.const 3))     ;; ":"
    (call $emit (local.get $value) (local.get $value_len))
    (call $emit (i32.const 0x0f0) (i32.const 3)))    ;; "}}

  ;; -------------------------------------------------------------------------
  ;; Byte and string helpers
  ;; -------------------------------------------------------------------------

  ;; The input byte at `p`, or -1 past the end of the input.
  (func $byte (param $p i32) (result i32)
    (if (result i32) (i32.ge_u (local.get $p) (global.get $in_end))
      (then (i32.const -1))
      (else (i32.load8_u (local.get $p)))))

  ;; JSON whitespace: space, tab, newline, carriage return.
  (func $is_ws (param $c i32) (result i32)
    (i32.or
      (i32.or (i32.eq (local.get $c) (i32.const 32))
              (i32.eq (local.get $c) (i32.const 9)))
      (i32.or (i32.eq (local.get $c) (i32.const 10))
              (i32.eq (local.get $c) (i32.const 13)))))

  ;; First position at or after `p` that is not whitespace.
  (func $skip_ws (param $p i32) (result i32)
    (loop $more
      (if (call $is_ws (call $byte (local.get $p)))
        (then
          (local.set $p (i32.add (local.get $p) (i32.const 1)))
          (br $more))))
    (local.get $p))

  ;; Do `len` bytes at `a` equal those at `b`?
  (func $mem_eq (param $a i32) (param $b i32) (param $len i32) (result i32)
    (local $i i32)
    (block $differ
      (loop $more
        (if (i32.lt_u (local.get $i) (local.get $len))
          (then
            (br_if $differ
              (i32.ne (i32.load8_u (i32.add (local.get $a) (local.get $i)))
                      (i32.load8_u (i32.add (local.get $b) (local.get $i)))))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $more))))
      (return (i32.const 1)))
    (i32.const 0))

  ;; ASCII lower case.
  (func $lower (param $c i32) (result i32)
    (if (result i32)
        (i32.le_u (i32.sub (local.get $c) (i32.const 65 (; A ;))) (i32.const 25))
      (then (i32.or (local.get $c) (i32.const 0x20)))
      (else (local.get $c))))

  ;; Does the string s/s_len end with suf/suf_len (ASCII case-insensitive)?
  ;; An empty suffix always matches.
  (func $ends_with_ci
    (param $s i32) (param $s_len i32) (param $suf i32) (param $suf_len i32)
    (result i32)
    (local $tail i32)
    (local $i i32)
    (if (i32.gt_u (local.get $suf_len) (local.get $s_len))
      (then (return (i32.const 0))))
    (local.set $tail
      (i32.add (local.get $s) (i32.sub (local.get $s_len) (local.get $suf_len))))
    (block $differ
      (loop $more
        (if (i32.lt_u (local.get $i) (local.get $suf_len))
          (then
            (br_if $differ
              (i32.ne
                (call $lower
                  (i32.load8_u (i32.add (local.get $tail) (local.get $i))))
                (call $lower
                  (i32.load8_u (i32.add (local.get $suf) (local.get $i))))))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $more))))
      (return (i32.const 1)))
    (i32.const 0))

  ;; -------------------------------------------------------------------------
  ;; JSON walking
  ;; -------------------------------------------------------------------------

  ;; `p` is at the opening quote of a string; return the position just past
  ;; its closing quote.  A backslash escapes the following byte, whatever it
  ;; is, so the closing quote is the first one not preceded by an odd number
  ;; of backslashes.  (Hot loop: loads inline rather than via $byte.)
  (func $skip_string (param $p i32) (result i32)
    (local $c i32)
    (if (i32.ne (call $byte (local.get $p)) (i32.const 34 (; " ;)))
      (then (call $fail)))
    (local.set $p (i32.add (local.get $p) (i32.const 1)))
    (loop $more
      (if (i32.ge_u (local.get $p) (global.get $in_end))
        (then (call $fail)))                        ;; unterminated string
      (local.set $c (i32.load8_u (local.get $p)))
      (if (i32.eq (local.get $c) (i32.const 34 (; " ;)))
        (then (return (i32.add (local.get $p) (i32.const 1)))))
      (local.set $p
        (i32.add (local.get $p)
          (select (i32.const 2) (i32.const 1)
            (i32.eq (local.get $c) (i32.const 92 (; \ ;))))))
      (br $more))
    (unreachable))

  ;; Skip one JSON value starting at `p` (leading whitespace allowed) and
  ;; return the position just past it.
  (func $skip_value (param $p i32) (result i32)
    (local $c i32)
    (local $depth i32)
    (local $start i32)
    (local.set $p (call $skip_ws (local.get $p)))
    (local.set $c (call $byte (local.get $p)))

    ;; a string
    (if (i32.eq (local.get $c) (i32.const 34 (; " ;)))
      (then (return (call $skip_string (local.get $p)))))

    ;; an object or array: count brackets until depth returns to zero,
    ;; skipping strings whole so brackets inside them do not count
    (if (i32.or (i32.eq (local.get $c) (i32.const 123 (; { ;)))
                (i32.eq (local.get $c) (i32.const 91 (; [ ;))))
      (then
        (loop $more
          (if (i32.ge_u (local.get $p) (global.get $in_end))
            (then (call $fail)))                    ;; unbalanced
          (local.set $c (i32.load8_u (local.get $p)))
          (if (i32.eq (local.get $c) (i32.const 34 (; " ;)))
            (then
              (local.set $p (call $skip_string (local.get $p)))
              (br $more)))
          (if (i32.or (i32.eq (local.get $c) (i32.const 123 (; { ;)))
                      (i32.eq (local.get $c) (i32.const 91 (; [ ;))))
            (then
              (local.set $depth (i32.add (local.get $depth) (i32.const 1)))))
          (if (i32.or (i32.eq (local.get $c) (i32.const 125 (; } ;)))
                      (i32.eq (local.get $c) (i32.const 93 (; ] ;))))
            (then
              (local.set $depth (i32.sub (local.get $depth) (i32.const 1)))
              (if (i32.eqz (local.get $depth))
                (then (return (i32.add (local.get $p) (i32.const 1)))))))
          (local.set $p (i32.add (local.get $p) (i32.const 1)))
          (br $more))))

    ;; a scalar (number, true, false, null): runs to the next delimiter
    (local.set $start (local.get $p))
    (block $done
      (loop $more
        (local.set $c (call $byte (local.get $p)))
        (br_if $done (i32.eq (local.get $c) (i32.const -1)))
        (br_if $done (i32.eq (local.get $c) (i32.const 44 (; , ;))))
        (br_if $done (i32.eq (local.get $c) (i32.const 125 (; } ;))))
        (br_if $done (i32.eq (local.get $c) (i32.const 93 (; ] ;))))
        (br_if $done (call $is_ws (local.get $c)))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $more)))
    (if (i32.eq (local.get $p) (local.get $start))
      (then (call $fail)))                          ;; no value here
    (local.get $p))

  ;; `obj` is at the `{` of an object.  Walk its top-level members and return
  ;; the position where the value of member `key` (raw bytes key/key_len)
  ;; starts, or -1 if there is no such member.
  (func $find_member (param $obj i32) (param $key i32) (param $key_len i32)
    (result i32)
    (local $p i32)
    (local $k i32)          ;; opening quote of the member's key
    (local $k_end i32)      ;; just past its closing quote
    (local $c i32)
    (if (i32.ne (call $byte (local.get $obj)) (i32.const 123 (; { ;)))
      (then (call $fail)))
    (local.set $p (call $skip_ws (i32.add (local.get $obj) (i32.const 1))))
    (if (i32.eq (call $byte (local.get $p)) (i32.const 125 (; } ;)))
      (then (return (i32.const -1))))               ;; empty object
    (loop $member
      ;; "key"
      (local.set $k (local.get $p))
      (local.set $k_end (call $skip_string (local.get $k)))
      ;; :
      (local.set $p (call $skip_ws (local.get $k_end)))
      (if (i32.ne (call $byte (local.get $p)) (i32.const 58 (; : ;)))
        (then (call $fail)))
      (local.set $p (call $skip_ws (i32.add (local.get $p) (i32.const 1))))
      ;; is this the key we want?  (contents are k+1 .. k_end-1)
      (if (i32.and
            (i32.eq (i32.sub (i32.sub (local.get $k_end) (local.get $k))
                             (i32.const 2))
                    (local.get $key_len))
            (call $mem_eq (i32.add (local.get $k) (i32.const 1))
                          (local.get $key) (local.get $key_len)))
        (then (return (local.get $p))))
      ;; no: skip the value, then `,` (next member) or `}` (not found)
      (local.set $p (call $skip_ws (call $skip_value (local.get $p))))
      (local.set $c (call $byte (local.get $p)))
      (if (i32.eq (local.get $c) (i32.const 44 (; , ;)))
        (then
          (local.set $p (call $skip_ws (i32.add (local.get $p) (i32.const 1))))
          (br $member)))
      (if (i32.eq (local.get $c) (i32.const 125 (; } ;)))
        (then (return (i32.const -1)))))
    (call $fail)
    (i32.const -1))

  ;; Look up member `key` of the object at `obj`.  If it exists and is a
  ;; string, return the raw contents between its quotes as (ptr, len);
  ;; otherwise return (-1, 0).
  (func $string_member (param $obj i32) (param $key i32) (param $key_len i32)
    (result i32 i32)
    (local $v i32)
    (local.set $v
      (call $find_member (local.get $obj) (local.get $key) (local.get $key_len)))
    (if (i32.or (i32.eq (local.get $v) (i32.const -1))
                (i32.ne (call $byte (local.get $v)) (i32.const 34 (; " ;))))
      (then (return (i32.const -1) (i32.const 0))))
    (i32.add (local.get $v) (i32.const 1))
    (i32.sub (i32.sub (call $skip_string (local.get $v)) (local.get $v))
             (i32.const 2)))
)
