//! The host program of a `.cu` repro ([`HOST_PROGRAM`]): decode the images, run the reference
//! kernel (when the manifest has one), allocate, upload, launch, wait, and judge with the
//! harness's oracles ported to C++ (`oracle::check_memory`, `oracle::check_values`,
//! `oracle::check_determinism`, `reference::kernel_expected`). It reads only the tables the data
//! section declares (`cfr_allocs`, `cfr_runs`, `cfr_blob`, `cfr_entries`, `cfr_launches`,
//! `cfr_args`, `cfr_expects`), so it is the same text for every manifest.

/// The host program (see the module docs).
pub const HOST_PROGRAM: &str = r#"// ======== the host program (the harness's oracles, ported) ========
static int cfr_failures = 0;
static unsigned char* cfr_image[CFR_N_ALLOCS];  // initial bytes, decoded
static unsigned char* cfr_dev[CFR_N_ALLOCS];    // device allocations (null while not allocated)
static const unsigned cfr_dtype_bytes[9] = {2, 2, 4, 8, 1, 1, 4, 4, 8};

static double cfr_f64_from_bits(unsigned long long b) { double d; memcpy(&d, &b, 8); return d; }

static double cfr_half(unsigned h) {
    unsigned s = h >> 15, e = (h >> 10) & 31u, m = h & 1023u;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m + 1024u), (int)e - 25);
    return s ? -v : v;
}

static double cfr_f32(unsigned u) { float f; memcpy(&f, &u, 4); return (double)f; }

static unsigned long long cfr_load_bits(const unsigned char* p, unsigned bytes) {
    unsigned long long v = 0;
    for (unsigned k = 0; k < bytes; k++) v |= (unsigned long long)p[k] << (8 * k);
    return v;
}

// An element's value from its bits (data::from_bits).
static double cfr_value(unsigned long long bits, int dtype) {
    switch (dtype) {
    case 0: return cfr_half((unsigned)bits);
    case 1: return cfr_f32((unsigned)bits << 16);
    case 2: return cfr_f32((unsigned)bits);
    case 3: return cfr_f64_from_bits(bits);
    case 4: return (double)(signed char)(unsigned char)bits;
    case 5: return (double)(unsigned char)bits;
    case 6: return (double)(int)(unsigned)bits;
    case 7: return (double)(unsigned)bits;
    default: return (double)(long long)bits;
    }
}

static void cfr_fail(const char* kind, const char* oracle, const char* fmt, ...) {
    printf("FAIL %s (%s): ", kind, oracle);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    cfr_failures++;
}

static unsigned cfr_eb(const cfr_alloc& a) { return cfr_dtype_bytes[a.dtype]; }

static unsigned long long cfr_numel(const cfr_alloc& a) {
    unsigned long long n = 1;
    for (int d = 0; d < a.rank; d++) n *= a.shape[d];
    return n;
}

// Every element in logical row-major order: f(linear, element offset) (plan::for_each_offset).
template <typename F> static void cfr_for_each(const cfr_alloc& a, F f) {
    unsigned long long n = cfr_numel(a), idx[8] = {0, 0, 0, 0, 0, 0, 0, 0}, off = 0;
    for (unsigned long long linear = 0; linear < n; linear++) {
        f(linear, off);
        for (int d = a.rank - 1; d >= 0; d--) {
            off += a.strides[d];
            if (++idx[d] < a.shape[d]) break;
            off -= a.strides[d] * idx[d];
            idx[d] = 0;
        }
    }
}

// A logical index as the harness writes it, with the dims' names: [batch=0, seq_q=3, 1].
struct cfr_where { char text[640]; };

static cfr_where cfr_describe(const cfr_alloc& a, const unsigned long long* idx) {
    cfr_where w;
    size_t n = (size_t)snprintf(w.text, sizeof w.text, "[");
    for (int d = 0; d < a.rank && n < sizeof w.text; d++) {
        const char* sep = d ? ", " : "";
        if (a.dims[d]) n += (size_t)snprintf(w.text + n, sizeof w.text - n, "%s%s=%llu", sep, a.dims[d], idx[d]);
        else n += (size_t)snprintf(w.text + n, sizeof w.text - n, "%s%llu", sep, idx[d]);
    }
    if (n < sizeof w.text) snprintf(w.text + n, sizeof w.text - n, "]");
    return w;
}

static cfr_where cfr_at_linear(const cfr_alloc& a, unsigned long long linear) {
    unsigned long long idx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int d = a.rank - 1; d >= 0; d--) {
        unsigned long long s = a.shape[d] ? a.shape[d] : 1;
        idx[d] = linear % s;
        linear /= s;
    }
    return cfr_describe(a, idx);
}

// The element holding a byte of the span, or false for a stride gap (arena::element_at).
static bool cfr_element_at(const cfr_alloc& a, unsigned long long byte, unsigned long long* idx) {
    unsigned long long rem = byte / cfr_eb(a);
    int order[8], n = 0;
    for (int d = 0; d < a.rank; d++) {
        idx[d] = 0;
        if (a.strides[d] > 0) order[n++] = d;
    }
    for (int i = 1; i < n; i++) {  // stable sort by (stride, extent), largest first
        int x = order[i], j = i - 1;
        while (j >= 0 && (a.strides[order[j]] < a.strides[x] || (a.strides[order[j]] == a.strides[x] && a.shape[order[j]] < a.shape[x]))) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = x;
    }
    for (int k = 0; k < n; k++) {
        int d = order[k];
        unsigned long long q = rem / a.strides[d];
        if (q >= a.shape[d]) return false;
        idx[d] = q;
        rem -= q * a.strides[d];
    }
    return rem == 0;
}

static unsigned long long cfr_fnv1a64(const unsigned char* p, unsigned long long n) {
    unsigned long long h = 0xcbf29ce484222325ull;
    for (unsigned long long i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

static unsigned char* cfr_decode(int i) {
    const cfr_alloc& a = cfr_allocs[i];
    unsigned char* out = (unsigned char*)malloc(a.total ? a.total : 1);
    if (!out) { fprintf(stderr, "repro: out of host memory\n"); exit(2); }
    unsigned long long pos = 0, lit = a.literal_offset;
    for (unsigned long long r = a.first_run; r < a.first_run + a.n_runs; r++) {
        const cfr_run& run = cfr_runs[r];
        if (pos + run.bytes > a.total) break;
        if (run.period == 0) { memcpy(out + pos, cfr_blob + lit, run.bytes); lit += run.bytes; }
        else for (unsigned long long j = 0; j < run.bytes; j++) out[pos + j] = run.pattern[j % run.period];
        pos += run.bytes;
    }
    if (pos != a.total || cfr_fnv1a64(out, a.total) != a.fnv1a64) {
        fprintf(stderr, "repro: the embedded image of allocation %d (%s) does not decode to its checksum: the file was edited or damaged\n", i, a.name);
        exit(2);
    }
    return out;
}

// launch::classify
static const char* cfr_kind_of(cudaError_t e, bool at_launch) {
    if ((int)e == 716) return "misaligned_address";
    if ((int)e == 700) return "illegal_address";
    if ((int)e == 719) return "launch_failure";
    if (at_launch || (int)e == 701 || (int)e == 1) return "launch_rejected";
    return "cuda_error";
}

static int cfr_finish(void) {
    if (CFR_EXPECTED[0]) printf("saved finding: %s\n", CFR_EXPECTED);
    if (CFR_SIGNATURE[0]) printf("saved signature: %s\n", CFR_SIGNATURE);
    if (cfr_failures) printf("RESULT: FAIL (%d finding%s)\n", cfr_failures, cfr_failures == 1 ? "" : "s");
    else printf("RESULT: PASS\n");
    fflush(stdout);
    return cfr_failures ? 1 : 0;
}

static void cfr_cuda_failed(const char* what, cudaError_t e, bool at_launch) {
    printf("CUDA error: %s (%d): %s [%s]\n", cudaGetErrorName(e), (int)e, cudaGetErrorString(e), what);
    cfr_fail(cfr_kind_of(e, at_launch), "cuda_status", "the kernel failed with %s (%d)", cudaGetErrorName(e), (int)e);
    exit(cfr_finish());
}

static void cfr_setup(const char* what, cudaError_t e) {
    if (e == cudaSuccess) return;
    printf("repro: %s failed: %s (%d): %s (not a finding: the case could not run)\n", what, cudaGetErrorName(e), (int)e, cudaGetErrorString(e));
    exit(2);
}

// A reference run that cannot finish is the reference's problem, not a finding (worker::reference).
static void cfr_reference_failed(int program, const char* what, cudaError_t e) {
    printf("repro: the reference kernel's %s run: %s failed: %s (%d): %s (not a finding: fix the reference)\n", cfr_launches[program].what, what,
           cudaGetErrorName(e), (int)e, cudaGetErrorString(e));
    exit(2);
}

// Uploads allocation i from its image; an uninitialised one gets only its redzones.
static void cfr_upload(int i) {
    const cfr_alloc& a = cfr_allocs[i];
    if (a.uninit) {
        cfr_setup("cudaMemcpy", cudaMemcpy(cfr_dev[i], cfr_image[i], a.data_offset, cudaMemcpyHostToDevice));
        unsigned long long end = a.data_offset + a.span;
        cfr_setup("cudaMemcpy", cudaMemcpy(cfr_dev[i] + end, cfr_image[i] + end, a.total - end, cudaMemcpyHostToDevice));
    } else {
        cfr_setup("cudaMemcpy", cudaMemcpy(cfr_dev[i], cfr_image[i], a.total, cudaMemcpyHostToDevice));
    }
}

// One allocation per tensor of a program: cudaMalloc returns 256-byte-aligned pointers, so the
// case's byte offset alone decides each tensor's residue mod 16, as in the harness.
static void cfr_allocate(int program) {
    for (int i = 0; i < CFR_N_ALLOCS; i++) {
        const cfr_alloc& a = cfr_allocs[i];
        if (a.program != program) continue;
        cfr_setup("cudaMalloc", cudaMalloc((void**)&cfr_dev[i], a.total ? a.total : 1));
        if ((unsigned long long)(size_t)cfr_dev[i] % 256 != 0) printf("warning: allocation %s is not 256-byte aligned\n", a.name);
        cfr_upload(i);
    }
}

static void cfr_release(int program) {
    for (int i = 0; i < CFR_N_ALLOCS; i++)
        if (cfr_allocs[i].program == program && cfr_dev[i]) { cudaFree(cfr_dev[i]); cfr_dev[i] = nullptr; }
}

static unsigned char* cfr_download(int i, const char* what) {
    const cfr_alloc& a = cfr_allocs[i];
    unsigned char* host = (unsigned char*)malloc(a.total ? a.total : 1);
    cudaError_t e = cudaMemcpy(host, cfr_dev[i], a.total, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        if (a.program == 0) cfr_cuda_failed(what, e, false);
        cfr_reference_failed(a.program, what, e);
    }
    return host;
}

union cfr_slot { void* ptr; int i32; unsigned u32; long long i64; unsigned long long u64; float f32; double f64; };

static cudaError_t cfr_start_launch(const void* entry, const cfr_launch& l) {
    static cfr_slot slots[sizeof cfr_args / sizeof cfr_args[0]];
    static void* params[sizeof cfr_args / sizeof cfr_args[0]];
    if (l.skip) return cudaSuccess;  // the host's guard holds: it launches nothing
    for (int i = 0; i < l.n_args; i++) {
        const cfr_arg& a = cfr_args[l.first_arg + i];
        cfr_slot& s = slots[i];
        switch (a.kind) {
        case 0: s.ptr = cfr_dev[a.value] + cfr_allocs[a.value].data_offset; break;
        case 1: s.i32 = (int)(unsigned)a.value; break;
        case 2: s.u32 = (unsigned)a.value; break;
        case 3: s.i64 = (long long)a.value; break;
        case 4: s.u64 = a.value; break;
        case 5: { unsigned b = (unsigned)a.value; memcpy(&s.f32, &b, 4); break; }
        default: memcpy(&s.f64, &a.value, 8); break;
        }
        params[i] = &s;
    }
    return cudaLaunchKernel(entry, dim3(l.grid[0], l.grid[1], l.grid[2]), dim3(l.block[0], l.block[1], l.block[2]), params, l.shared_bytes, 0);
}

static cudaError_t cfr_start(int program) { return cfr_start_launch(cfr_entries[program], cfr_launches[program]); }

// The kernel under test: its launch, then a launch sequence's later launches in order on the
// same stream (launch::launch_at), with no synchronisation between them.
static cudaError_t cfr_start_kernel() {
    cudaError_t e = cfr_start(0);
    for (int s = 0; e == cudaSuccess && s < CFR_N_STEPS; s++) {
        if (!cfr_steps[s].skip && cfr_steps[s].shared_bytes > 48 * 1024 && cfr_steps[s].shared_opt_in) {
            e = cudaFuncSetAttribute(cfr_step_entries[s], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfr_steps[s].shared_bytes);
            if (e != cudaSuccess) break;
        }
        e = cfr_start_launch(cfr_step_entries[s], cfr_steps[s]);
    }
    return e;
}

// Sets the opt-in attribute a launch with more than 48 KiB of dynamic shared memory needs
// (launch::Module::reserve_shared), unless the manifest's host never opts in (then the launch
// is refused as it is there). False when this GPU allows less (*optin says how much); *e is the
// attribute call's status.
static bool cfr_reserve_shared(int program, int device, int* optin, cudaError_t* e) {
    const cfr_launch& l = cfr_launches[program];
    *e = cudaSuccess;
    if (!l.shared_opt_in || l.shared_bytes <= 48u * 1024u) return true;
    cfr_setup("cudaDeviceGetAttribute", cudaDeviceGetAttribute(optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if ((unsigned)*optin < l.shared_bytes) return false;
    *e = cudaFuncSetAttribute(cfr_entries[program], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)l.shared_bytes);
    return true;
}

// Waits for a launch with a watchdog; returns its CUDA status.
static cudaError_t cfr_wait(unsigned long long timeout_ms, int program) {
    auto start = std::chrono::steady_clock::now();
    for (;;) {
        cudaError_t e = cudaStreamQuery(0);
        if (e != cudaErrorNotReady) {
            cudaError_t s = cudaDeviceSynchronize();
            return e != cudaSuccess ? e : s;
        }
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
        if (timeout_ms > 0 && (unsigned long long)ms > timeout_ms) {
            if (program != 0) {
                printf("repro: the reference kernel's %s run was still running after %llu ms (not a finding: fix the reference)\n", cfr_launches[program].what, timeout_ms);
                fflush(stdout);
                _Exit(2);
            }
            cfr_fail("hang", "watchdog", "the kernel was still running after %llu ms (--timeout-ms changes the limit)", timeout_ms);
            cfr_finish();
            fflush(stdout);
            _Exit(1);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

// What one judged output is held to: its gold values (logical order) and its rule.
struct cfr_judgement { int alloc, rule; double* gold; double factor, err_lowp, floor, bound, rel; };
static cfr_judgement cfr_judgements[CFR_N_EXPECT > 0 ? CFR_N_EXPECT : 1];

// An allocation's element values in logical order.
static double* cfr_values(int i, const unsigned char* bytes) {
    const cfr_alloc& a = cfr_allocs[i];
    unsigned long long n = cfr_numel(a);
    double* v = (double*)malloc(sizeof(double) * (n ? n : 1));
    unsigned eb = cfr_eb(a);
    cfr_for_each(a, [&](unsigned long long linear, unsigned long long off) { v[linear] = cfr_value(cfr_load_bits(bytes + a.data_offset + off * eb, eb), a.dtype); });
    return v;
}

// The gold and rules of a built-in op, computed by cudafuzz and embedded.
static void cfr_embedded_judgements(void) {
    for (int e = 0; e < CFR_N_EXPECT; e++) {
        const cfr_expect& x = cfr_expects[e];
        unsigned long long n = cfr_numel(cfr_allocs[x.alloc]);
        double* gold = (double*)malloc(sizeof(double) * (n ? n : 1));
        memcpy(gold, cfr_blob + x.gold_offset, 8 * n);
        double b[4];
        for (int k = 0; k < 4; k++) b[k] = cfr_f64_from_bits(x.bits[k]);
        if (x.rule == 0) cfr_judgements[e] = {x.alloc, 0, gold, b[0], b[1], b[2], b[3], 0.0};
        else cfr_judgements[e] = {x.alloc, 1, gold, 0.0, 0.0, 0.0, 0.0, b[0]};
    }
}

// One run of the user's reference kernel (worker::reference): its own dense arena, launched and
// waited for; each judged output is read back and must hold no sentinel (a reference that
// leaves elements unwritten is the reference's bug, not a finding).
static void cfr_run_reference(int program, int device, unsigned long long timeout_ms, double** values) {
    const char* what = cfr_launches[program].what;
    cfr_allocate(program);
    int optin = 0;
    cudaError_t e;
    if (!cfr_reserve_shared(program, device, &optin, &e)) {
        printf("repro: the reference kernel's %s run asks for %u bytes of dynamic shared memory; this GPU allows %d\n", what, cfr_launches[program].shared_bytes, optin);
        exit(2);
    }
    if (e != cudaSuccess) cfr_reference_failed(program, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", e);
    printf("reference kernel, %s run: grid (%u, %u, %u), block (%u, %u, %u)\n", what, cfr_launches[program].grid[0], cfr_launches[program].grid[1],
           cfr_launches[program].grid[2], cfr_launches[program].block[0], cfr_launches[program].block[1], cfr_launches[program].block[2]);
    fflush(stdout);
    e = cfr_start(program);
    if (e != cudaSuccess) cfr_reference_failed(program, "cudaLaunchKernel", e);
    e = cfr_wait(timeout_ms, program);
    if (e != cudaSuccess) cfr_reference_failed(program, "cudaDeviceSynchronize", e);
    for (int k = 0; k < CFR_N_EXPECT; k++) {
        int i = program == 1 ? cfr_expects[k].gold_alloc : cfr_expects[k].baseline_alloc;
        const cfr_alloc& a = cfr_allocs[i];
        unsigned char* bytes = cfr_download(i, "cudaMemcpy device to host");
        unsigned eb = cfr_eb(a);
        unsigned long long left = 0;
        if (a.sentinel)
            cfr_for_each(a, [&](unsigned long long, unsigned long long off) { left += cfr_load_bits(bytes + a.data_offset + off * eb, eb) == a.sentinel_bits; });
        if (left) {
            printf("repro: the reference kernel (%s run) left %llu of %llu elements of %s unwritten: fix the reference\n", what, left, cfr_numel(a), a.name);
            exit(2);
        }
        values[k] = cfr_values(i, bytes);
        free(bytes);
    }
    cfr_release(program);
}

// The bound of one output from the reference kernel's two runs (reference::kernel_expected):
// factor x max |baseline - gold| over the elements finite in both, plus the floor (the
// manifest's, or 4 u max |gold|).
static void cfr_kernel_judgement(int k, double* gold, const double* baseline) {
    const cfr_expect& x = cfr_expects[k];
    unsigned long long n = cfr_numel(cfr_allocs[x.alloc]);
    double err = 0.0, peak = 0.0;
    for (unsigned long long i = 0; i < n; i++) {
        if (!std::isfinite(gold[i])) continue;
        if (fabs(gold[i]) > peak) peak = fabs(gold[i]);
        if (std::isfinite(baseline[i]) && baseline[i] != gold[i] && fabs(baseline[i] - gold[i]) > err) err = fabs(baseline[i] - gold[i]);
    }
    double factor = cfr_f64_from_bits(x.bits[0]), floor = cfr_f64_from_bits(x.bits[1]), u = cfr_f64_from_bits(x.bits[2]);
    if (std::isnan(floor)) floor = 4.0 * u * peak;
    cfr_judgements[k] = {x.alloc, 0, gold, factor, err, floor, factor * err + floor, 0.0};
    printf("reference: %s may be %.3e from the gold: %g x %.3e (baseline error) + %.3e (floor)\n", cfr_allocs[x.alloc].name, factor * err + floor, factor, err, floor);
}

// The judged outputs' gold and rules: embedded, or from the reference kernel's runs (first, as in
// the worker, before the kernel under test touches the GPU).
static void cfr_references(int device, unsigned long long timeout_ms) {
    if (CFR_N_PROGRAMS == 1) {
        cfr_embedded_judgements();
        return;
    }
    static double* runs[2][CFR_N_EXPECT > 0 ? CFR_N_EXPECT : 1];
    for (int p = 1; p <= 2; p++) cfr_run_reference(p, device, timeout_ms, runs[p - 1]);
    for (int k = 0; k < CFR_N_EXPECT; k++) {
        cfr_kernel_judgement(k, runs[0][k], runs[1][k]);
        free(runs[1][k]);
    }
}

// Damage to the redzones before and after one allocation's data.
static void cfr_check_redzones(const cfr_alloc& a, const unsigned char* b, const unsigned char* n) {
    unsigned long long ds = a.data_offset, de = ds + a.span + a.tail, count = 0, pos = 0, last = 0;
    bool found = false;
    for (unsigned long long x = ds; x-- > 0;) if (b[x] != n[x]) { if (!found) { pos = x; found = true; } count++; }
    if (found)
        cfr_fail("canary_damage", "canary", "%llu bytes of the redzone before %s were overwritten (write before the start); nearest %llu bytes before the first byte",
                 count, a.name, ds - pos);
    count = 0;
    found = false;
    for (unsigned long long x = de; x < a.total; x++) if (b[x] != n[x]) { if (!found) { pos = x; found = true; } last = x; count++; }
    if (found)
        cfr_fail("canary_damage", "canary", "%llu bytes after the end of %s were overwritten, up to %llu bytes past its last byte (write past the end); first %llu bytes past the last byte",
                 count, a.name, last - de + 1, pos - de + 1);
}

// Elements of an output still holding the sentinel.
static void cfr_check_unwritten(const cfr_alloc& a, const unsigned char* data) {
    unsigned long long left = 0, first = 0;
    unsigned eb = cfr_eb(a);
    cfr_for_each(a, [&](unsigned long long linear, unsigned long long off) {
        if (cfr_load_bits(data + off * eb, eb) == a.sentinel_bits) { if (!left) first = linear; left++; }
    });
    if (left) cfr_fail("unwritten_output", "sentinel", "%llu of %llu elements of %s were never written; first at %s", left, cfr_numel(a), a.name, cfr_at_linear(a, first).text);
}

// The data span: stride gaps, then unwritten outputs or changed inputs.
static void cfr_check_span(const cfr_alloc& a, const unsigned char* b, const unsigned char* n, bool sentinel) {
    bool gapless = cfr_numel(a) * cfr_eb(a) == a.span;
    unsigned long long gaps = 0, first_gap = 0, elems = 0, first_elem = 0, idx[8];
    for (unsigned long long x = 0; x < a.span; x++) {
        if (b[x] == n[x]) continue;
        if (gapless || cfr_element_at(a, x, idx)) { if (!elems) first_elem = x; elems++; }
        else { if (!gaps) first_gap = x; gaps++; }
    }
    if (gaps)
        cfr_fail("canary_damage", "canary", "%llu bytes in the stride gaps of %s were overwritten (write between rows); first at stride gap byte %llu", gaps, a.name, first_gap);
    if (sentinel) {
        cfr_check_unwritten(a, n);
    } else if (a.role == 0 && elems) {
        cfr_element_at(a, first_elem, idx);
        cfr_fail("input_clobbered", "input_integrity", "%llu bytes of input %s changed during the launch; first at %s", elems, a.name, cfr_describe(a, idx).text);
    }
}

// Canaries in redzones and gaps, unchanged inputs, no sentinel left (oracle::check_memory).
static void cfr_check_memory(unsigned char* const* after) {
    for (int i = 0; i < CFR_N_ALLOCS; i++) {
        const cfr_alloc& a = cfr_allocs[i];
        if (a.program != 0) continue;
        // An output pre-filled with the sentinel is checked even when untouched: a kernel that
        // writes nothing leaves every sentinel.
        bool sentinel = a.role != 0 && a.sentinel;
        if (!sentinel && memcmp(cfr_image[i], after[i], a.total) == 0) continue;
        cfr_check_redzones(a, cfr_image[i], after[i]);
        cfr_check_span(a, cfr_image[i] + a.data_offset, after[i] + a.data_offset, sentinel);
    }
}

// Non-finite values the reference does not have, and the output's rule (oracle::check_values).
static void cfr_check_output(const cfr_judgement& j, const unsigned char* bytes) {
    const cfr_alloc& a = cfr_allocs[j.alloc];
    unsigned eb = cfr_eb(a);
    unsigned long long nonfinite = 0, first_nf = 0, special = 0, first_sp = 0, over = 0, worst_i = 0, bad = 0, first_bad = 0;
    double err = 0.0, worst = -1.0, worst_x = 0.0, bad_x = 0.0;
    cfr_for_each(a, [&](unsigned long long i, unsigned long long off) {
        unsigned long long bits = cfr_load_bits(bytes + a.data_offset + off * eb, eb);
        if (a.sentinel && bits == a.sentinel_bits) return;  // reported by the memory oracle
        double x = cfr_value(bits, a.dtype), r = j.gold[i];
        if (!std::isfinite(r)) {
            if (!(x == r || (std::isnan(x) && std::isnan(r)))) { if (!special) first_sp = i; special++; }
            return;
        }
        if (!std::isfinite(x)) { if (!nonfinite) first_nf = i; nonfinite++; return; }
        double d = fabs(x - r);
        if (x != r && d > err) err = d;
        if (d >= worst) { worst = d; worst_i = i; worst_x = x; }  // the last largest, as Iterator::max_by
        if (d > j.bound) over++;
        if (d > j.rel * (fabs(r) > 1.0 ? fabs(r) : 1.0)) { if (!bad) { first_bad = i; bad_x = x; } bad++; }
    });
    if (nonfinite)
        cfr_fail("nan_leak", "nan_leak", "%llu elements of %s are NaN or infinite where the fp64 reference is finite (out-of-bounds read of a poisoned redzone or gap?); first at %s",
                 nonfinite, a.name, cfr_at_linear(a, first_nf).text);
    if (special)
        cfr_fail("numerical_error", "reference", "%llu elements of %s are not the NaN or infinity the fp64 reference has there; first at %s", special, a.name,
                 cfr_at_linear(a, first_sp).text);
    if (j.rule == 0 && err > j.bound)
        cfr_fail("numerical_error", "reference", "max |%s - ref64| = %.3e exceeds %g x %.3e (same-precision error) + %.3e = %.3e; %llu elements over; worst at %s: %.9g vs reference %.9g",
                 a.name, err, j.factor, j.err_lowp, j.floor, j.bound, over, cfr_at_linear(a, worst_i).text, worst_x, j.gold[worst_i]);
    if (j.rule == 1 && bad)
        cfr_fail("numerical_error", "reference", "%llu values of %s differ from the reference by more than %g (relative); first: %.9g vs %.9g at %s", bad, a.name, j.rel, bad_x,
                 j.gold[first_bad], cfr_at_linear(a, first_bad).text);
}

// The kernel run again on fresh written tensors; every judged output must be bit-identical
// (oracle::check_determinism).
static void cfr_check_determinism(unsigned char* const* after, unsigned long long timeout_ms) {
    for (int i = 0; i < CFR_N_ALLOCS; i++)
        if (cfr_allocs[i].program == 0 && cfr_allocs[i].role != 0) cfr_upload(i);
    cudaError_t e = cfr_start_kernel();
    if (e != cudaSuccess) cfr_cuda_failed("cudaLaunchKernel (second run)", e, true);
    e = cfr_wait(timeout_ms, 0);
    if (e != cudaSuccess) cfr_cuda_failed("cudaDeviceSynchronize after the second run", e, false);
    for (int i = 0; i < CFR_N_ALLOCS; i++) {
        const cfr_alloc& a = cfr_allocs[i];
        if (a.program != 0 || (a.role != 1 && a.role != 2) || a.order_dependent) continue;
        unsigned char* again = cfr_download(i, "cudaMemcpy device to host after the second run");
        unsigned eb = cfr_eb(a);
        unsigned long long diff = 0, first = 0;
        cfr_for_each(a, [&](unsigned long long linear, unsigned long long off) {
            unsigned long long at = a.data_offset + off * eb;
            if (cfr_load_bits(after[i] + at, eb) != cfr_load_bits(again + at, eb)) { if (!diff) first = linear; diff++; }
        });
        if (diff)
            cfr_fail("nondeterminism", "determinism", "%llu elements of %s differ between two runs of the same case (a race?); first at %s", diff, a.name, cfr_at_linear(a, first).text);
        free(again);
    }
}

static int cfr_write_images(const char* dir) {
    for (int i = 0; i < CFR_N_ALLOCS; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/alloc%d-%s.bin", dir, i, cfr_allocs[i].name);
        FILE* f = fopen(path, "wb");
        if (!f || fwrite(cfr_image[i], 1, cfr_allocs[i].total, f) != cfr_allocs[i].total) { fprintf(stderr, "repro: cannot write %s\n", path); return 2; }
        fclose(f);
        printf("wrote %s (%llu bytes)\n", path, cfr_allocs[i].total);
    }
    return 0;
}

// The kernel under test: allocate, launch, wait, download, judge.
static int cfr_run_kernel(int device, unsigned long long timeout_ms, bool determinism) {
    cfr_allocate(0);
    for (int i = 0; i < CFR_N_ALLOCS; i++) {
        if (cfr_allocs[i].program != 0) continue;
        unsigned char* data = cfr_dev[i] + cfr_allocs[i].data_offset;
        printf("  %s at %p (data %p, ptr %% 16 = %llu)\n", cfr_allocs[i].name, (void*)cfr_dev[i], (void*)data, (unsigned long long)(size_t)data % 16);
    }
    const cfr_launch& l = cfr_launches[0];
    int optin = 0;
    cudaError_t e;
    if (!cfr_reserve_shared(0, device, &optin, &e)) {
        cfr_fail("launch_rejected", "cuda_status", "launch asks for %u bytes of dynamic shared memory; this GPU allows at most %d", l.shared_bytes, optin);
        return cfr_finish();
    }
    if (e != cudaSuccess) cfr_cuda_failed("cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", e, true);
    if (l.skip)
        printf("launch: none (the host's guard, `skip`, holds for this case: it launches nothing)\n");
    else
        printf("launch: grid (%u, %u, %u), block (%u, %u, %u), %u bytes of dynamic shared memory\n", l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared_bytes);
    for (int s = 0; s < CFR_N_STEPS; s++) {
        const cfr_launch& t = cfr_steps[s];
        if (t.skip)
            printf("then %s: none (its guard holds)\n", t.what);
        else
            printf("then %s: grid (%u, %u, %u), block (%u, %u, %u), %u bytes of dynamic shared memory\n", t.what, t.grid[0], t.grid[1], t.grid[2], t.block[0], t.block[1], t.block[2], t.shared_bytes);
    }
    fflush(stdout);
    e = cfr_start_kernel();
    if (e != cudaSuccess) cfr_cuda_failed("cudaLaunchKernel", e, true);
    e = cfr_wait(timeout_ms, 0);
    if (e != cudaSuccess) cfr_cuda_failed("cudaDeviceSynchronize after the launch", e, false);
    unsigned char* after[CFR_N_ALLOCS];
    for (int i = 0; i < CFR_N_ALLOCS; i++) after[i] = cfr_allocs[i].program == 0 ? cfr_download(i, "cudaMemcpy device to host after the launch") : nullptr;
    cfr_check_memory(after);
    for (int k = 0; k < CFR_N_EXPECT; k++) cfr_check_output(cfr_judgements[k], after[cfr_judgements[k].alloc]);
    if (determinism) cfr_check_determinism(after, timeout_ms);
    for (int i = 0; i < CFR_N_ALLOCS; i++) free(after[i]);
    cfr_release(0);
    return cfr_finish();
}

int main(int argc, char** argv) {
    unsigned long long timeout_ms = CFR_TIMEOUT_MS;
    bool determinism = true;
    const char* image_dir = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) timeout_ms = strtoull(argv[++i], nullptr, 10);
        else if (!strcmp(argv[i], "--no-determinism")) determinism = false;
        else if (!strcmp(argv[i], "--write-image") && i + 1 < argc) image_dir = argv[++i];
        else {
            printf("usage: %s [--timeout-ms N] [--no-determinism] [--write-image DIR]\n", argv[0]);
            return !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    printf("cudafuzz repro: %s, case %s\n", CFR_KERNEL, CFR_CASE);
    for (int i = 0; i < CFR_N_ALLOCS; i++) cfr_image[i] = cfr_decode(i);
    if (image_dir) return cfr_write_images(image_dir);
    int device = 0, major = 0, minor = 0;
    cfr_setup("cudaGetDevice", cudaGetDevice(&device));
    cfr_setup("cudaDeviceGetAttribute", cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    cfr_setup("cudaDeviceGetAttribute", cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    printf("device %d: sm_%d%d\n", device, major, minor);
    cfr_references(device, timeout_ms);
    int status = cfr_run_kernel(device, timeout_ms, determinism);
    for (int i = 0; i < CFR_N_ALLOCS; i++) free(cfr_image[i]);
    return status;
}
"#;
