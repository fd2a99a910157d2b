/*
 * idmint.generate._speedups: the compiled core of the tick generators.
 *
 * The pure-Python core in core.py is the reference; this module holds only the
 * hot state it keeps per generator and does in C what the pure core does per ID
 * and per tick when nothing needs deciding:
 *
 * - Run: the values of the open tick (next value, step, how many are left),
 *   the wall-clock time until which they may go out (the end of the tick, or
 *   sooner when a claim must be renewed), and, once Python has *armed* it, what
 *   it needs to open the following ticks itself: the generator's Layout (how a
 *   tick's base value is made), the highest tick the claim allows (its ceiling),
 *   the monotonic deadline of the claim's grant, and the fork count it was
 *   armed under.
 * - HotPath: generate(), generate_nowait() and batch() of one generator class,
 *   installed as methods. They take values from the Run, open the next tick
 *   when the Run is armed and the clock has reached it, and wait for the clock
 *   at the cap (one absolute sleep on CLOCK_MONOTONIC to the tick, the GIL
 *   released, a clock step seen exactly as clock.py's waits see one).
 *   Anything else (a tick the Run may not open, the clock behind, a claim
 *   past its deadline or ceiling, a fork, an error) goes to the Python core,
 *   which decides, raises or waits, and arms the Run again when it opens a tick.
 *   Nothing here decides about a claim.
 *
 * Every object is touched with the GIL held, which makes each step below atomic
 * for other threads: the GIL is released only around the sleep, after which
 * everything is read afresh. The core is used only where the GIL is enabled
 * (core.py does not load it on free-threaded CPython).
 *
 * Values are built the way the pure core builds them: the value type's tp_alloc
 * and a store into its slots, at offsets read at run time from the slots' member
 * descriptors (never assumed). Values up to 128 bits wide are computed here;
 * anything wider is refused when a Run is made, and the generator stays on the
 * pure core.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030C0000
#include <structmember.h>
#define IDM_T_OBJECT_EX T_OBJECT_EX
#define IDM_READONLY READONLY
#else
#define IDM_T_OBJECT_EX Py_T_OBJECT_EX
#define IDM_READONLY Py_READONLY
#endif

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

typedef unsigned __int128 u128;

/* The SHA-256 of this file as setup.py built it: a test compares it with the file,
 * so a build that failed (and left an older module in place) cannot go unseen. */
#ifndef IDMINT_SOURCE_SHA256
#define IDMINT_SOURCE_SHA256 "unknown"
#endif

#define NS_PER_S 1000000000LL
#define NO_DEADLINE INT64_MAX

/* -- configuration: clock.py's waiting constants, given once by core.py ----------- */

static int64_t spin_ns = 20000;
static int64_t slice_ns = 5000000;
static int64_t step_slack_ns = 100000;

/* -- fork generation ---------------------------------------------------------------- */

/* How many fork()s separate this process from the one that loaded the module.
 * Bumped in the child by pthread_atfork, so any fork() counts, also one that
 * bypasses os.fork()'s hooks; a Run armed under another count goes to Python. */
static uint64_t forks;

static void
count_fork_in_child(void)
{
    forks++;
}

/* -- random bits -------------------------------------------------------------------- */

/* xoshiro256** seeded from getrandom(), seeded again in a child of fork(): the
 * low bits some schemes fill at random per ID (short60 with random=True). */
static uint64_t prng_state[4];
static uint64_t prng_forks = UINT64_MAX; /* never seeded */

static inline uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* Fill ``size`` bytes from getrandom() (the kernel's CSPRNG); -1 with OSError. */
static int
fill_random(void *buffer, size_t size)
{
    size_t got = 0;
    while (got < size) {
        ssize_t n = getrandom((char *)buffer + got, size - got, 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

static int
prng_seed(void)
{
    uint64_t seed[4] = {0, 0, 0, 0};
    if (fill_random(seed, sizeof seed) < 0) {
        return -1;
    }
    if ((seed[0] | seed[1] | seed[2] | seed[3]) == 0) {
        seed[0] = 1; /* the one state xoshiro cannot leave */
    }
    memcpy(prng_state, seed, sizeof seed);
    prng_forks = forks;
    return 0;
}

/* ``bits`` (1..64) random bits; -1 with an exception only when seeding fails. */
static inline int
random_bits(int bits, uint64_t *out)
{
    if (prng_forks != forks && prng_seed() < 0) {
        return -1;
    }
    uint64_t *s = prng_state;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    *out = result >> (64 - bits);
    return 0;
}

/* Bytes straight from the kernel's CSPRNG, read 8 KiB at a time: the bits uuid7
 * fills at random, which must not be guessable from their neighbours (a PRNG's
 * would be). An ID takes only the bytes its random bits need (five for uuid7's
 * 40: the kernel's cost is per byte, and most of what the bits cost). Each byte
 * goes out once; a child of fork() drops what its parent had read, which the
 * parent hands out too. */
#define NOISE_BYTES 8192
static unsigned char noise_bytes[NOISE_BYTES];
static size_t noise_left;
static uint64_t noise_forks = UINT64_MAX; /* never read */

/* ``count`` (1..8) unused bytes as the low bytes of ``*out``; -1 with an exception
 * only when the kernel refuses. */
static inline int
noise_word(size_t count, uint64_t *out)
{
    if (noise_left < count || noise_forks != forks) {
        noise_left = 0;
        if (fill_random(noise_bytes, sizeof noise_bytes) < 0) {
            return -1;
        }
        noise_left = NOISE_BYTES;
        noise_forks = forks;
    }
    noise_left -= count;
    uint64_t word = 0;
    memcpy(&word, noise_bytes + noise_left, count);
    *out = word;
    return 0;
}

/* -- ints up to 128 bits ---------------------------------------------------------- */

static PyObject *int_zero, *int_one, *int_sixty_four; /* made once, at import */

/* An int of 65 to 128 bits, through CPython's public byte-array conversion. */
static PyObject *
int_from_bytes(u128 value)
{
    unsigned char bytes[16];
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(bytes, &value, sizeof bytes);
#else
    for (int i = 0; i < 16; i++) {
        bytes[i] = (unsigned char)(value >> (8 * i));
    }
#endif
#if PY_VERSION_HEX >= 0x030D0000
    return PyLong_FromUnsignedNativeBytes(
        bytes, 16, Py_ASNATIVEBYTES_LITTLE_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER);
#else
    return _PyLong_FromByteArray(bytes, 16, 1, 0);
#endif
}

#if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
/* CPython 3.11 keeps an int as 30-bit digits after a size (cpython/longintrepr.h):
 * writing them into _PyLong_New's object costs a fifth of the byte-array
 * conversion, which is most of a uuid7's cost. Used only once the module's import
 * has made the same ints both ways (digits_agree); the byte array otherwise. */
#define IDM_DIGITS 1
static int digits_agree;

static PyObject *
int_from_digits(u128 value)
{
    Py_ssize_t count = 0;
    for (u128 rest = value; rest; rest >>= PyLong_SHIFT) {
        count++;
    }
    PyLongObject *made = _PyLong_New(count);
    if (made == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++, value >>= PyLong_SHIFT) {
        made->ob_digit[i] = (digit)(value & PyLong_MASK);
    }
    return (PyObject *)made;
}

/* ``obj``'s value from its digits, if it is an int from 0 to 2**128 - 1: 1, with
 * ``*out`` set; 0 when it is not (negative, wider, or not an exact int). */
static inline int
u128_from_digits(PyObject *obj, u128 *out)
{
    if (!PyLong_CheckExact(obj)) {
        return 0;
    }
    Py_ssize_t count = Py_SIZE(obj);
    if (count < 0 || count > (128 + PyLong_SHIFT - 1) / PyLong_SHIFT) {
        return 0;
    }
    const digit *digits = ((PyLongObject *)obj)->ob_digit;
    u128 value = 0;
    for (Py_ssize_t i = count - 1; i >= 0; i--) {
        if (value >> (128 - PyLong_SHIFT)) {
            return 0; /* one more digit would push bits past 128 */
        }
        value = (value << PyLong_SHIFT) | digits[i];
    }
    *out = value;
    return 1;
}

/* Whether int_from_digits makes the ints int_from_bytes makes, and u128_from_digits
 * reads them back: 0 or 1; -1 on error. */
static int
check_digits(void)
{
    const u128 top = ~(u128)0;
    const u128 tried[] = {
        (u128)1 << 64,
        ((u128)1 << 64) + 1,
        ((u128)1 << 90) - 1,
        (u128)1 << 120,
        ((u128)0x0123456789ABCDEFULL << 64) | 0xFEDCBA9876543210ULL,
        top,
        top >> 1,
        top >> 38,
    };
    for (size_t i = 0; i < sizeof tried / sizeof tried[0]; i++) {
        PyObject *fast = int_from_digits(tried[i]);
        PyObject *slow = int_from_bytes(tried[i]);
        int same = fast != NULL && slow != NULL ? PyObject_RichCompareBool(fast, slow, Py_EQ) : -1;
        u128 read;
        if (same == 1 && !(u128_from_digits(slow, &read) && read == tried[i])) {
            same = 0;
        }
        Py_XDECREF(fast);
        Py_XDECREF(slow);
        if (same != 1) {
            return same;
        }
    }
    return 1;
}
#endif

static PyObject *
int_from_u128(u128 value)
{
    if ((value >> 64) == 0) {
        return PyLong_FromUnsignedLongLong((unsigned long long)value);
    }
#ifdef IDM_DIGITS
    if (digits_agree) {
        return int_from_digits(value);
    }
#endif
    return int_from_bytes(value);
}

/* A non-negative int below 2**128; -1 with OverflowError or TypeError otherwise. */
static int
u128_from_int(PyObject *obj, const char *what, u128 *out)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", what);
        return -1;
    }
#ifdef IDM_DIGITS
    /* Without it an int of 65 to 128 bits (elastic64's tagged run values) costs an
     * OverflowError raised and cleared, most of what reading it costs. */
    if (digits_agree && u128_from_digits(obj, out)) {
        return 0;
    }
#endif
    unsigned long long low = PyLong_AsUnsignedLongLong(obj);
    if (!(low == (unsigned long long)-1 && PyErr_Occurred())) {
        *out = low; /* below 2**64: the common case */
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
        return -1;
    }
    PyErr_Clear();
    int negative = PyObject_RichCompareBool(obj, int_zero, Py_LT);
    if (negative < 0) {
        return -1;
    }
    if (negative) {
        PyErr_Format(PyExc_OverflowError, "%s is negative", what);
        return -1;
    }
    low = PyLong_AsUnsignedLongLongMask(obj);
    if (low == (unsigned long long)-1 && PyErr_Occurred()) {
        return -1;
    }
    PyObject *high_obj = PyNumber_Rshift(obj, int_sixty_four);
    if (high_obj == NULL) {
        return -1;
    }
    unsigned long long high = PyLong_AsUnsignedLongLong(high_obj);
    Py_DECREF(high_obj);
    if (high == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_OverflowError, "%s does not fit in 128 bits", what);
        return -1;
    }
    *out = ((u128)high << 64) | low;
    return 0;
}

static int range_parts(PyObject *values, u128 *first, u128 *step);

/* -- slots found at run time ------------------------------------------------------ */

#define SLOT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))

/* The offset of the object slot ``descr`` (a member descriptor of __slots__) in
 * instances of ``owner``; -1 with TypeError when it is anything else. */
static Py_ssize_t
slot_offset(PyObject *descr, PyTypeObject *owner, const char *what)
{
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s is not a slot", what);
        return -1;
    }
    PyMemberDescrObject *member = (PyMemberDescrObject *)descr;
    PyMemberDef *def = member->d_member;
    if (def->type != IDM_T_OBJECT_EX || (def->flags & IDM_READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s is not a writable object slot", what);
        return -1;
    }
    if (!PyType_IsSubtype(owner, PyDescr_TYPE(member))) {
        PyErr_Format(PyExc_TypeError, "%s is not a slot of %s", what, owner->tp_name);
        return -1;
    }
    if (def->offset < (Py_ssize_t)sizeof(PyObject) ||
        def->offset + (Py_ssize_t)sizeof(PyObject *) > owner->tp_basicsize) {
        PyErr_Format(PyExc_TypeError, "%s lies outside %s", what, owner->tp_name);
        return -1;
    }
    return def->offset;
}

/* Store a new reference in a slot, dropping what it held. */
static inline void
slot_set(PyObject *obj, Py_ssize_t offset, PyObject *value)
{
    PyObject *old = SLOT(obj, offset);
    SLOT(obj, offset) = value;
    Py_XDECREF(old);
}

/* -- Layout ------------------------------------------------------------------------ */

/* How a generator's IDs are made from a tick (core.TickLayout, with the
 * generator's tick length, cap and sequence step): a tick's base value is
 * identity | time << time_shift, where time is the tick minus the first tick
 * the scheme can hold, its time_bits reversed where the scheme stores them so
 * (uid64's spread mode); its IDs are base + k * step for k below limit. */
typedef struct {
    PyObject_HEAD
    int64_t tick_ns;
    int64_t low, high; /* the ticks the scheme can hold */
    int64_t max_ahead; /* ticks it may borrow past the clock */
    u128 identity;
    u128 step;
    uint64_t limit;
    int time_shift;
    int time_bits;
    int reversed;
} LayoutObject;

static PyTypeObject LayoutType;

/* Each byte with its bits in reverse order (filled at import). */
static uint8_t reversed_bytes[256];

/* ``value``'s low ``bits`` bits (1..64) in reverse order. */
static inline uint64_t
reverse_bits(uint64_t value, int bits)
{
    uint64_t out = 0;
    for (int i = 0; i < 8; i++, value >>= 8) {
        out = (out << 8) | reversed_bytes[value & 0xFF];
    }
    return out >> (64 - bits);
}

static inline u128
layout_base(const LayoutObject *layout, int64_t tick)
{
    uint64_t time = (uint64_t)(tick - layout->low);
    if (layout->reversed) {
        time = reverse_bits(time, layout->time_bits);
    }
    return layout->identity | ((u128)time << layout->time_shift);
}

static PyObject *
Layout_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"tick_ns", "limit", "step", "max_ahead", "identity", "time_shift",
                            "low", "high", "reversed", NULL};
    long long tick_ns, max_ahead, low, high;
    unsigned long long limit;
    int time_shift, reversed;
    PyObject *step_obj, *identity_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$LKOLOiLLp:Layout", names, &tick_ns, &limit,
                                     &step_obj, &max_ahead, &identity_obj, &time_shift, &low,
                                     &high, &reversed)) {
        return NULL;
    }
    u128 step, identity;
    if (u128_from_int(step_obj, "step", &step) < 0 ||
        u128_from_int(identity_obj, "identity", &identity) < 0) {
        return NULL;
    }
    if (tick_ns <= 0 || limit == 0 || step == 0 || max_ahead < 0 || low < 0 || high < low ||
        time_shift < 0) {
        PyErr_SetString(PyExc_ValueError, "a layout out of range");
        return NULL;
    }
    int time_bits = 0;
    for (uint64_t span = (uint64_t)(high - low); span; span >>= 1) {
        time_bits++;
    }
    if (time_bits == 0) {
        time_bits = 1;
    }
    /* The largest value must fit in 128 bits: identity | time, plus the last step. */
    if (time_shift + time_bits > 128) {
        PyErr_SetString(PyExc_OverflowError, "the layout's values do not fit in 128 bits");
        return NULL;
    }
    u128 top = identity | ((((u128)1 << time_bits) - 1) << time_shift);
    u128 steps, last;
    if (__builtin_mul_overflow(step, (u128)(limit - 1), &steps) ||
        __builtin_add_overflow(top, steps, &last)) {
        PyErr_SetString(PyExc_OverflowError, "the layout's values do not fit in 128 bits");
        return NULL;
    }
    /* Ticks times tick_ns must stay within int64: the clock's ns do until 2262. */
    if (high > INT64_MAX / tick_ns - max_ahead - 2) {
        high = INT64_MAX / tick_ns - max_ahead - 2;
    }
    LayoutObject *self = (LayoutObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->tick_ns = tick_ns;
    self->limit = limit;
    self->step = step;
    self->max_ahead = max_ahead;
    self->identity = identity;
    self->time_shift = time_shift;
    self->time_bits = time_bits;
    self->low = low;
    self->high = high;
    self->reversed = reversed;
    return (PyObject *)self;
}

static PyObject *
Layout_base(LayoutObject *self, PyObject *arg)
{
    long long tick = PyLong_AsLongLong(arg);
    if (tick == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (tick < self->low || tick > self->high) {
        PyErr_SetString(PyExc_ValueError, "a tick outside the layout's range");
        return NULL;
    }
    return int_from_u128(layout_base(self, tick));
}

static PyMethodDef Layout_methods[] = {
    {"base", (PyCFunction)Layout_base, METH_O, "The base value of a tick (sequence zero)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LayoutType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "idmint.generate._speedups.Layout",
    .tp_basicsize = sizeof(LayoutObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "How a generator's IDs are made from a tick.",
    .tp_new = Layout_new,
    .tp_methods = Layout_methods,
};

/* -- Run ----------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    u128 next;       /* the next value of the open tick */
    u128 step;
    uint64_t left;   /* values of the open tick not taken yet */
    uint64_t size;   /* values this run has held, over every tick it opened */
    int64_t until_ns; /* wall-clock ns before which its values may go out */
    /* Below this the clock is behind the run's tick (it stepped back): the pure
     * core's batch() sees that under the lock, at once, so batch() here hands
     * over to it; generate() goes on to the end of the tick, as the pure one. */
    int64_t from_ns;
    /* Armed: it opens the ticks after its own itself. */
    LayoutObject *layout; /* NULL: not armed */
    int64_t tick;         /* the tick its values belong to */
    int64_t ceiling;      /* the highest tick it may open */
    int64_t deadline_mono; /* the claim grant's monotonic deadline; NO_DEADLINE */
    uint64_t forks;       /* the fork count it was made under */
    /* The generator's clock when it is not the system's (tests): read through
     * time_ns()/monotonic_ns(), waited on through sleep_until_ns(). */
    PyObject *clock;
} RunObject;

static PyTypeObject RunType;

static PyObject *str_time_ns, *str_monotonic_ns, *str_sleep_until_ns, *str_generate_slow,
    *str_batch_rest;

static inline int64_t
timespec_ns(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * NS_PER_S + ts->tv_nsec;
}

static int
clock_reading(PyObject *clock, PyObject *method, int64_t *out)
{
    PyObject *reading = PyObject_CallMethodNoArgs(clock, method);
    if (reading == NULL) {
        return -1;
    }
    long long value = PyLong_AsLongLong(reading);
    Py_DECREF(reading);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = value;
    return 0;
}

/* The wall clock as time.time_ns() reads it (CLOCK_REALTIME), or the run's clock. */
static inline int
read_wall(PyObject *clock, int64_t *out)
{
    if (clock == NULL) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        *out = timespec_ns(&ts);
        return 0;
    }
    return clock_reading(clock, str_time_ns, out);
}

/* The monotonic clock as time.monotonic_ns() reads it (CLOCK_MONOTONIC), or the run's. */
static inline int
read_mono(PyObject *clock, int64_t *out)
{
    if (clock == NULL) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        *out = timespec_ns(&ts);
        return 0;
    }
    return clock_reading(clock, str_monotonic_ns, out);
}

static PyObject *
Run_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"values", "size", "until_ns", "from_ns", "clock", NULL};
    PyObject *values, *clock = Py_None;
    unsigned long long size;
    long long until_ns, from_ns = INT64_MIN;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!KL|LO:Run", names, &PyRange_Type, &values,
                                     &size, &until_ns, &from_ns, &clock)) {
        return NULL;
    }
    Py_ssize_t length = PyObject_Size(values);
    if (length < 0) {
        return NULL;
    }
    u128 start = 0, step = 1;
    if (length > 0) {
        PyObject *start_obj = PyObject_GetAttrString(values, "start");
        if (start_obj == NULL) {
            return NULL;
        }
        int failed = u128_from_int(start_obj, "a run's first value", &start);
        Py_DECREF(start_obj);
        if (failed) {
            return NULL;
        }
        PyObject *step_obj = PyObject_GetAttrString(values, "step");
        if (step_obj == NULL) {
            return NULL;
        }
        failed = u128_from_int(step_obj, "a run's step", &step);
        Py_DECREF(step_obj);
        if (failed) {
            return NULL;
        }
        u128 last;
        if (__builtin_mul_overflow(step, (u128)(length - 1), &last) ||
            __builtin_add_overflow(start, last, &last)) {
            PyErr_SetString(PyExc_OverflowError, "a run's values do not fit in 128 bits");
            return NULL;
        }
    }
    RunObject *self = (RunObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->next = start;
    self->step = step;
    self->left = (uint64_t)length;
    self->size = size;
    self->until_ns = until_ns;
    self->from_ns = from_ns;
    self->layout = NULL;
    self->tick = -1;
    self->ceiling = -1;
    self->deadline_mono = NO_DEADLINE;
    self->forks = forks;
    if (clock != Py_None) {
        Py_INCREF(clock);
        self->clock = clock;
    }
    return (PyObject *)self;
}

static int
Run_traverse(RunObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->layout);
    Py_VISIT(self->clock);
    return 0;
}

static int
Run_clear(RunObject *self)
{
    Py_CLEAR(self->layout);
    Py_CLEAR(self->clock);
    return 0;
}

static void
Run_dealloc(RunObject *self)
{
    PyObject_GC_UnTrack(self);
    Run_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Run_iternext(RunObject *self)
{
    if (self->left == 0) {
        return NULL;
    }
    u128 value = self->next;
    self->next += self->step;
    self->left--;
    return int_from_u128(value);
}

/* take(n): up to n values of the open tick, as a range (Python's locked path). */
static PyObject *
Run_take(RunObject *self, PyObject *arg)
{
    Py_ssize_t want = PyLong_AsSsize_t(arg);
    if (want == -1 && PyErr_Occurred()) {
        return NULL;
    }
    uint64_t count = want < 0 ? 0 : (uint64_t)want;
    if (count > self->left) {
        count = self->left;
    }
    u128 first = self->next;
    PyObject *start = int_from_u128(first);
    PyObject *stop = int_from_u128(first + self->step * count);
    PyObject *step = int_from_u128(self->step);
    PyObject *taken = NULL;
    if (start != NULL && stop != NULL && step != NULL) {
        PyObject *range_args[3] = {start, stop, step};
        taken = PyObject_Vectorcall((PyObject *)&PyRange_Type, range_args, 3, NULL);
    }
    Py_XDECREF(start);
    Py_XDECREF(stop);
    Py_XDECREF(step);
    if (taken != NULL) {
        /* Only now, when nothing can fail any more: the values are the caller's. */
        self->next = first + self->step * count;
        self->left -= count;
    }
    return taken;
}

/* take_exactly(n): n values as a range, or None (and nothing taken) if fewer are left:
 * all or nothing in one step, whoever else takes from the run meanwhile. */
static PyObject *
Run_take_exactly(RunObject *self, PyObject *arg)
{
    Py_ssize_t want = PyLong_AsSsize_t(arg);
    if (want == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (want < 0 || (uint64_t)want > self->left) {
        Py_RETURN_NONE;
    }
    return Run_take(self, arg);
}

/* arm(layout, tick, ceiling, deadline_mono_ns): let the run open the ticks after
 * ``tick`` itself, up to ``ceiling``, until the monotonic clock reaches the
 * deadline (None: no claim, no deadline). Python arms a run it has just opened. */
static PyObject *
Run_arm(RunObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "arm() takes layout, tick, ceiling, deadline_mono_ns");
        return NULL;
    }
    if (!Py_IS_TYPE(args[0], &LayoutType)) {
        PyErr_SetString(PyExc_TypeError, "arm() needs a Layout");
        return NULL;
    }
    long long tick = PyLong_AsLongLong(args[1]);
    if (tick == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int overflow = 0;
    long long ceiling = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (ceiling == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow > 0) {
        ceiling = INT64_MAX; /* no ceiling an int64 tick could reach */
    }
    else if (overflow < 0) {
        ceiling = -1;
    }
    long long deadline = NO_DEADLINE;
    if (args[3] != Py_None) {
        deadline = PyLong_AsLongLong(args[3]);
        if (deadline == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    LayoutObject *layout = (LayoutObject *)args[0];
    if (tick < layout->low || tick > layout->high) {
        PyErr_SetString(PyExc_ValueError, "arm() with a tick outside the layout's range");
        return NULL;
    }
    Py_INCREF(layout);
    Py_XSETREF(self->layout, layout);
    self->tick = tick;
    self->ceiling = ceiling;
    self->deadline_mono = deadline;
    self->forks = forks;
    Py_RETURN_NONE;
}

/* disarm(): the run opens no tick itself any more (Python is about to decide). */
static PyObject *
Run_disarm(RunObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_CLEAR(self->layout);
    Py_RETURN_NONE;
}

static PyObject *
Run_length_hint(RunObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(self->left);
}

static PyObject *
Run_get_values(RunObject *self, void *Py_UNUSED(closure))
{
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *
Run_get_until_ns(RunObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->until_ns);
}

/* Setting until_ns (Python's locked path, or a claim fencing the generator with 0)
 * also disarms: a run whose time Python has set opens no tick itself. */
static int
Run_set_until_ns(RunObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "until_ns cannot be deleted");
        return -1;
    }
    int overflow = 0;
    long long until = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (until == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        until = overflow > 0 ? INT64_MAX : INT64_MIN;
    }
    Py_CLEAR(self->layout);
    self->until_ns = until;
    return 0;
}

static PyObject *
Run_get_size(RunObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->size);
}

static PyObject *
Run_get_tick(RunObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->tick);
}

static PyObject *
Run_get_armed(RunObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->layout != NULL && self->forks == forks);
}

static PyMethodDef Run_methods[] = {
    {"take", (PyCFunction)Run_take, METH_O, "Up to n values of the open tick, as a range."},
    {"take_exactly", (PyCFunction)Run_take_exactly, METH_O,
     "n values as a range, or None (nothing taken) if fewer are left."},
    {"arm", (PyCFunction)(void (*)(void))Run_arm, METH_FASTCALL,
     "Let the run open the ticks after its own (layout, tick, ceiling, deadline_mono_ns)."},
    {"disarm", (PyCFunction)Run_disarm, METH_NOARGS, "Open no tick without Python."},
    {"__length_hint__", (PyCFunction)Run_length_hint, METH_NOARGS, "Values left."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Run_getset[] = {
    {"values", (getter)Run_get_values, NULL, "The run itself, an iterator of its values.", NULL},
    {"until_ns", (getter)Run_get_until_ns, (setter)Run_set_until_ns,
     "Wall-clock ns before which its values may go out; setting it disarms the run.", NULL},
    {"size", (getter)Run_get_size, NULL, "Values the run has held.", NULL},
    {"tick", (getter)Run_get_tick, NULL, "The tick of its values (armed runs).", NULL},
    {"armed", (getter)Run_get_armed, NULL, "Whether it opens the next tick itself.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RunType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "idmint.generate._speedups.Run",
    .tp_basicsize = sizeof(RunObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The unissued values of a generator's open tick (the compiled core's run).",
    .tp_new = Run_new,
    .tp_dealloc = (destructor)Run_dealloc,
    .tp_traverse = (traverseproc)Run_traverse,
    .tp_clear = (inquiry)Run_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Run_iternext,
    .tp_methods = Run_methods,
    .tp_getset = Run_getset,
};

/* -- HotPath ------------------------------------------------------------------------- */

enum { GENERATE, GENERATE_NOWAIT, BATCH, TAKE };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind;
    PyTypeObject *owner;           /* the generator class */
    Py_ssize_t run_offset, tick_offset, waits_offset, make_offset;
    Py_ssize_t exhausted_offset, exhausted_tick_offset; /* exhausted_ticks, _exhausted_tick */
    PyTypeObject *id_type;         /* the value type */
    Py_ssize_t int_offset;         /* its _int slot */
    Py_ssize_t tag_offset;         /* the slot that takes the bits above tag_shift; -1 */
    int tag_shift;
    PyObject *maker;               /* a Python maker instead of the slots; NULL */
    int random_bits;
    /* Placement (uuid7): a run value's bits from split up go to high_shift, those below
     * to low_shift, fixed is set, and noise_mask's bits come from noise_word(). */
    int placed, place_split, place_high_shift, place_low_shift;
    u128 place_fixed, place_low_mask;
    uint64_t noise_mask;
    size_t noise_bytes;
    PyObject *pure;                /* the pure core's method: generators on the pure core */
    PyTypeObject *batch_type;      /* IdBatch */
    Py_ssize_t batch_ints_offset, batch_make_offset, batch_mask_offset, batch_texts_offset;
    PyObject *mask, *texts;        /* what each IdBatch of the class gets */
    PyObject *name;
} HotPathObject;

static PyTypeObject HotPathType;

enum { READY, WAIT, PYTHON, FAILED };

/* The ID of a run value placed as the class declares (``placed``), random bits drawn. */
static inline int
place(HotPathObject *hp, u128 value, u128 *out)
{
    uint64_t noise;
    if (noise_word(hp->noise_bytes, &noise) < 0) {
        return -1;
    }
    *out = ((value >> hp->place_split) << hp->place_high_shift) |
           ((value & hp->place_low_mask) << hp->place_low_shift) | hp->place_fixed |
           (noise & hp->noise_mask);
    return 0;
}

/* The value object for ``value`` (a run value: elastic64's carries its width
 * above bit 64; uuid7's is placed first), as the pure core makes it. */
static PyObject *
make_value(HotPathObject *hp, u128 value)
{
    if (hp->placed && hp->maker == NULL && place(hp, value, &value) < 0) {
        return NULL;
    }
    if (hp->maker != NULL) {
        PyObject *number = int_from_u128(value);
        if (number == NULL) {
            return NULL;
        }
        PyObject *made = PyObject_CallOneArg(hp->maker, number);
        Py_DECREF(number);
        return made;
    }
    PyObject *tag = NULL;
    if (hp->tag_offset >= 0) {
        tag = int_from_u128(value >> hp->tag_shift);
        if (tag == NULL) {
            return NULL;
        }
        value &= ((u128)1 << hp->tag_shift) - 1;
    }
    PyObject *number = int_from_u128(value);
    if (number == NULL) {
        Py_XDECREF(tag);
        return NULL;
    }
    PyObject *obj = hp->id_type->tp_alloc(hp->id_type, 0);
    if (obj == NULL) {
        Py_DECREF(number);
        Py_XDECREF(tag);
        return NULL;
    }
    slot_set(obj, hp->int_offset, number);
    if (tag != NULL) {
        slot_set(obj, hp->tag_offset, tag);
    }
    return obj;
}

/* One more wait in the generator's clock_waits (a slot holding an int). */
static int
count_wait(HotPathObject *hp, PyObject *self)
{
    PyObject *waits = SLOT(self, hp->waits_offset);
    PyObject *more = waits == NULL ? PyLong_FromLong(1) : PyNumber_Add(waits, int_one);
    if (more == NULL) {
        return -1;
    }
    slot_set(self, hp->waits_offset, more);
    return 0;
}

/* The run's tick ran out of sequence numbers before the clock lets the next open (a
 * wait at the cap): count it once in exhausted_ticks, however many callers wait for
 * it, remembering it in _exhausted_tick, as the pure core's _take_locked does. */
static int
count_exhausted(HotPathObject *hp, PyObject *self, int64_t tick)
{
    PyObject *last = SLOT(self, hp->exhausted_tick_offset);
    if (last != NULL) {
        long long seen = PyLong_AsLongLong(last);
        if (seen == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (seen == tick) {
            return 0;
        }
    }
    PyObject *count = SLOT(self, hp->exhausted_offset);
    PyObject *more = count == NULL ? PyLong_FromLong(1) : PyNumber_Add(count, int_one);
    if (more == NULL) {
        return -1;
    }
    PyObject *tick_obj = PyLong_FromLongLong(tick);
    if (tick_obj == NULL) {
        Py_DECREF(more);
        return -1;
    }
    slot_set(self, hp->exhausted_offset, more);
    slot_set(self, hp->exhausted_tick_offset, tick_obj);
    return 0;
}

/* At a tick boundary (the open tick used up, or past its time): open the next
 * tick if the run is armed and may, or say when to wait (``*target``: the wall
 * clock's ns), or hand over to Python. ``now``/``mono`` were read just before,
 * with nothing run in between. Mirrors _take_locked, for what it may do alone. */
static int
open_next(HotPathObject *hp, PyObject *self, RunObject *run, int64_t now, int64_t mono,
          int64_t *target)
{
    LayoutObject *layout = run->layout;
    if (layout == NULL || run->forks != forks || now < 0) {
        return PYTHON;
    }
    int64_t tick_ns = layout->tick_ns;
    int64_t now_tick = now / tick_ns;
    int64_t tick = run->tick;
    int64_t opening;
    if (now_tick > tick) {
        opening = now_tick;
    }
    else {
        if (now < (tick - layout->max_ahead) * tick_ns) {
            return PYTHON; /* the clock is behind the newest tick: a step back */
        }
        if (run->left) {
            return PYTHON; /* values left, past their time: the claim's deadline */
        }
        opening = tick + 1;
        if (opening - now_tick > layout->max_ahead) {
            *target = (opening - layout->max_ahead) * tick_ns;
            return WAIT;
        }
    }
    if (opening > run->ceiling || opening < layout->low || opening > layout->high) {
        return PYTHON;
    }
    int64_t until = (opening + 1) * tick_ns;
    if (run->deadline_mono != NO_DEADLINE) {
        if (mono >= run->deadline_mono) {
            return PYTHON;
        }
        int64_t cap = now + (run->deadline_mono - mono);
        if (cap < until) {
            until = cap;
        }
    }
    PyObject *tick_obj = PyLong_FromLongLong(opening); /* an int: allocating it runs nothing */
    if (tick_obj == NULL) {
        return FAILED;
    }
    run->next = layout_base(layout, opening);
    run->step = layout->step;
    run->size += layout->limit - run->left; /* what the old tick did not issue never was */
    run->left = layout->limit;
    run->tick = opening;
    run->until_ns = until;
    run->from_ns = (opening - layout->max_ahead) * tick_ns;
    slot_set(self, hp->tick_offset, tick_obj);
    return READY;
}

/* Wait until the wall clock reaches ``target``, as clock.py's sleep_until_ns
 * does: return early when the wall clock is seen stepping back, falling behind
 * the monotonic clock since ``since``/``since_mono`` (the readings the wait was
 * decided on, wall first), so a step between the decision and the wait counts
 * too. The caller looks at the clock again either way. */
static int
wait_until(HotPathObject *hp, PyObject *self, PyObject *clock, int64_t target, int64_t since,
           int64_t since_mono)
{
    if (count_wait(hp, self) < 0) {
        return -1;
    }
    if (clock != NULL) {
        PyObject *at = PyLong_FromLongLong(target);
        PyObject *decided = PyLong_FromLongLong(since);
        PyObject *result = NULL;
        if (at != NULL && decided != NULL) {
            /* A spare slot before the arguments: PY_VECTORCALL_ARGUMENTS_OFFSET lets the
             * callee use it (to prepend a bound method's self). */
            PyObject *call_args[4] = {NULL, clock, at, decided};
            result = PyObject_VectorcallMethod(str_sleep_until_ns, call_args + 1,
                                               3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        }
        Py_XDECREF(at);
        Py_XDECREF(decided);
        if (result == NULL) {
            return -1;
        }
        Py_DECREF(result);
        return 0;
    }
    int64_t wall = since, mono = since_mono;
    while (wall < target) {
        int64_t remaining = target - wall;
        if (remaining > spin_ns) {
            int64_t due = mono + (remaining < slice_ns ? remaining : slice_ns);
            struct timespec at = {.tv_sec = due / NS_PER_S, .tv_nsec = due % NS_PER_S};
            int status;
            Py_BEGIN_ALLOW_THREADS
            status = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
            Py_END_ALLOW_THREADS
            if (status == EINTR && PyErr_CheckSignals() < 0) {
                return -1; /* a signal handler raised (KeyboardInterrupt) */
            }
        }
        read_mono(NULL, &mono);
        read_wall(NULL, &wall);
        if ((mono - since_mono) - (wall - since) > step_slack_ns) {
            return 0;
        }
    }
    return 0;
}

/* The generator's run, if it is one of ours; NULL (no exception) otherwise. */
static inline RunObject *
run_of(HotPathObject *hp, PyObject *self)
{
    PyObject *run = SLOT(self, hp->run_offset);
    return (run != NULL && Py_IS_TYPE(run, &RunType)) ? (RunObject *)run : NULL;
}

/* Read the clocks, then look at the run: ready to take from, a wait, or Python.
 * The clocks come first because a clock of Python's own (tests) runs code that
 * may let other threads in; nothing after them does, up to the take. */
static int
next_step(HotPathObject *hp, PyObject *self, RunObject **run_out, int64_t *now, int64_t *mono,
          int64_t *target)
{
    int strict = hp->kind == BATCH;
    RunObject *run = run_of(hp, self);
    if (run == NULL) {
        return PYTHON;
    }
    PyObject *clock = run->clock;
    if (clock == NULL) {
        read_wall(NULL, now);
        if (run->left && *now < run->until_ns && run->forks == forks &&
            (!strict || *now >= run->from_ns)) {
            *run_out = run;
            return READY;
        }
        if (strict && *now < run->from_ns) {
            return PYTHON;
        }
        read_mono(NULL, mono);
        *run_out = run;
        return open_next(hp, self, run, *now, *mono, target);
    }
    Py_INCREF(clock);
    int failed = read_wall(clock, now) < 0 || read_mono(clock, mono) < 0;
    Py_DECREF(clock);
    if (failed) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return FAILED;
        }
        PyErr_Clear(); /* a time past int64's ns (the system clock's end, in 2262) */
        return PYTHON;
    }
    run = run_of(hp, self); /* again: the clock's code may have let another thread in */
    if (run == NULL) {
        return PYTHON;
    }
    *run_out = run;
    if (run->left && *now < run->until_ns && run->forks == forks &&
        (!strict || *now >= run->from_ns)) {
        return READY;
    }
    if (strict && *now < run->from_ns) {
        return PYTHON;
    }
    return open_next(hp, self, run, *now, *mono, target);
}

static int
is_instance(HotPathObject *hp, PyObject *self)
{
    return Py_TYPE(self) == hp->owner || PyType_IsSubtype(Py_TYPE(self), hp->owner);
}

static PyObject *
call_slow_generate(HotPathObject *hp, PyObject *self)
{
    PyObject *args[4] = {NULL, self, int_zero, hp->kind == GENERATE ? Py_True : Py_False};
    return PyObject_VectorcallMethod(str_generate_slow, args + 1,
                                     3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static PyObject *
hot_generate(HotPathObject *hp, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || kwnames != NULL || !is_instance(hp, args[0])) {
        return PyObject_Vectorcall(hp->pure, args, nargsf, kwnames);
    }
    PyObject *self = args[0];
    if (run_of(hp, self) == NULL) {
        return PyObject_Vectorcall(hp->pure, args, nargsf, NULL);
    }
    for (;;) {
        RunObject *run;
        int64_t now, mono, target;
        switch (next_step(hp, self, &run, &now, &mono, &target)) {
        case READY: {
            u128 value = run->next;
            run->next += run->step;
            run->left--;
            if (hp->random_bits) {
                uint64_t noise;
                if (random_bits(hp->random_bits, &noise) < 0) {
                    return NULL;
                }
                value |= noise;
            }
            return make_value(hp, value);
        }
        case WAIT: {
            if (count_exhausted(hp, self, run->tick) < 0) {
                return NULL;
            }
            if (hp->kind == GENERATE_NOWAIT) {
                Py_RETURN_NONE;
            }
            PyObject *clock = run->clock;
            Py_XINCREF(clock);
            int failed = wait_until(hp, self, clock, target, now, mono) < 0;
            Py_XDECREF(clock);
            if (failed) {
                return NULL;
            }
            continue;
        }
        case PYTHON:
            return call_slow_generate(hp, self);
        default:
            return NULL;
        }
    }
}

/* An IdBatch of ``ints`` (a new reference, taken over) for the generator. */
static PyObject *
make_batch(HotPathObject *hp, PyObject *self, PyObject *ints)
{
    PyObject *batch = hp->batch_type->tp_alloc(hp->batch_type, 0);
    if (batch == NULL) {
        Py_DECREF(ints);
        return NULL;
    }
    PyObject *make = SLOT(self, hp->make_offset);
    if (make == NULL) {
        make = Py_None;
    }
    Py_INCREF(make);
    Py_INCREF(hp->mask);
    Py_INCREF(hp->texts);
    slot_set(batch, hp->batch_ints_offset, ints);
    slot_set(batch, hp->batch_make_offset, make);
    slot_set(batch, hp->batch_mask_offset, hp->mask);
    slot_set(batch, hp->batch_texts_offset, hp->texts);
    return batch;
}

static PyObject *
range_of(u128 first, uint64_t count, u128 step)
{
    PyObject *start = int_from_u128(first);
    PyObject *stop = int_from_u128(first + step * count);
    PyObject *by = int_from_u128(step);
    PyObject *range = NULL;
    if (start != NULL && stop != NULL && by != NULL) {
        PyObject *range_args[3] = {start, stop, by};
        range = PyObject_Vectorcall((PyObject *)&PyRange_Type, range_args, 3, NULL);
    }
    Py_XDECREF(start);
    Py_XDECREF(stop);
    Py_XDECREF(by);
    return range;
}

/* Append ``count`` values from ``first`` on to ``out``, random bits filled in. */
static int
append_values(HotPathObject *hp, PyObject *out, u128 first, uint64_t count, u128 step)
{
    for (uint64_t i = 0; i < count; i++) {
        u128 value = first + step * i;
        if (hp->random_bits) {
            uint64_t noise;
            if (random_bits(hp->random_bits, &noise) < 0) {
                return -1;
            }
            value |= noise;
        }
        PyObject *number = int_from_u128(value);
        if (number == NULL) {
            return -1;
        }
        int failed = PyList_Append(out, number);
        Py_DECREF(number);
        if (failed) {
            return -1;
        }
    }
    return 0;
}

static PyObject *
hot_batch(HotPathObject *hp, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || kwnames != NULL || !is_instance(hp, args[0]) ||
        !PyLong_CheckExact(args[1])) {
        return PyObject_Vectorcall(hp->pure, args, nargsf, kwnames);
    }
    PyObject *self = args[0];
    int overflow = 0;
    long long count = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (overflow || count < 1 || run_of(hp, self) == NULL) {
        return PyObject_Vectorcall(hp->pure, args, nargsf, NULL);
    }
    uint64_t need = (uint64_t)count;
    PyObject *out = NULL; /* a list, once the batch is more than one range */
    for (;;) {
        RunObject *run;
        int64_t now, mono, target;
        switch (next_step(hp, self, &run, &now, &mono, &target)) {
        case READY: {
            uint64_t taken = need < run->left ? need : run->left;
            u128 first = run->next, step = run->step;
            run->next += step * taken;
            run->left -= taken;
            need -= taken;
            /* The values are ours now; what follows only builds objects. */
            if (need == 0 && out == NULL && !hp->random_bits) {
                PyObject *range = range_of(first, taken, step);
                return range == NULL ? NULL : make_batch(hp, self, range);
            }
            if (out == NULL && (out = PyList_New(0)) == NULL) {
                return NULL;
            }
            if (append_values(hp, out, first, taken, step) < 0) {
                Py_DECREF(out);
                return NULL;
            }
            if (need == 0) {
                return make_batch(hp, self, out);
            }
            continue;
        }
        case WAIT: {
            if (count_exhausted(hp, self, run->tick) < 0) {
                Py_XDECREF(out);
                return NULL;
            }
            PyObject *clock = run->clock;
            Py_XINCREF(clock);
            int failed = wait_until(hp, self, clock, target, now, mono) < 0;
            Py_XDECREF(clock);
            if (failed) {
                Py_XDECREF(out);
                return NULL;
            }
            continue;
        }
        case PYTHON: {
            if (out == NULL && (out = PyList_New(0)) == NULL) {
                return NULL;
            }
            PyObject *call_args[4] = {NULL, self, out, args[1]};
            PyObject *batch = PyObject_VectorcallMethod(
                str_batch_rest, call_args + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            Py_DECREF(out);
            return batch;
        }
        default:
            Py_XDECREF(out);
            return NULL;
        }
    }
}

/* A value of the run in the owner's slot (muid's offsets: no tick, no clock), or the
 * pure method's doing: a run used up (its error), made before a fork, or not ours. */
static PyObject *
hot_take(HotPathObject *hp, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs == 1 && kwnames == NULL && is_instance(hp, args[0])) {
        RunObject *run = run_of(hp, args[0]);
        if (run != NULL && run->left && run->forks == forks) {
            u128 value = run->next;
            run->next += run->step;
            run->left--;
            return make_value(hp, value);
        }
    }
    return PyObject_Vectorcall(hp->pure, args, nargsf, kwnames);
}

/* What ``each`` makes of every run value of ``values`` (a range, or a list of ints), as a
 * list in their order. */
static PyObject *
each_run_value(HotPathObject *hp, PyObject *values, PyObject *(*each)(HotPathObject *, u128))
{
    int is_range = PyRange_Check(values);
    if (!is_range && !PyList_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "run values come as a range or a list");
        return NULL;
    }
    Py_ssize_t length = PyObject_Size(values);
    u128 first = 0, step = 0;
    if (length < 0 || (is_range && length > 0 && range_parts(values, &first, &step) < 0)) {
        return NULL;
    }
    PyObject *out = PyList_New(length);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < length; i++) {
        u128 value = first + step * (u128)i;
        /* Its length checked each time: an int subclass's code could change the list. */
        if (!is_range && (i >= PyList_GET_SIZE(values) ||
                          u128_from_int(PyList_GET_ITEM(values, i), "a run value", &value) < 0)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_RuntimeError, "the list changed size");
            }
            Py_DECREF(out);
            return NULL;
        }
        PyObject *made = each(hp, value);
        if (made == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, made);
    }
    return out;
}

/* make_all(values): the value objects of run values, as a list (a batch of values that
 * has to be objects: muid's transaction.batch()). */
static PyObject *
HotPath_make_all(HotPathObject *self, PyObject *values)
{
    return each_run_value(self, values, make_value);
}

/* The ID of a run value, placed (``placed``), as an int. */
static PyObject *
placed_int(HotPathObject *hp, u128 value)
{
    return place(hp, value, &value) < 0 ? NULL : int_from_u128(value);
}

/* place_all(values): the IDs of a batch's run values, placed as make() places them, as a
 * list of ints (uuid7's batches). */
static PyObject *
HotPath_place_all(HotPathObject *self, PyObject *values)
{
    if (!self->placed || self->maker != NULL) {
        PyErr_SetString(PyExc_TypeError, "place_all() needs a placement made here");
        return NULL;
    }
    return each_run_value(self, values, placed_int);
}

/* make(value): the value object the hot path makes of a run value (for checks). */
static PyObject *
HotPath_make(HotPathObject *self, PyObject *arg)
{
    u128 value;
    if (u128_from_int(arg, "a run value", &value) < 0) {
        return NULL;
    }
    return make_value(self, value);
}

static int
optional_offset(PyObject *descr, PyTypeObject *owner, const char *what, Py_ssize_t *out)
{
    if (descr == Py_None) {
        *out = -1;
        return 0;
    }
    *out = slot_offset(descr, owner, what);
    return *out < 0 ? -1 : 0;
}

static PyObject *
HotPath_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"kind",       "owner",      "pure",       "run_slot",   "tick_slot",
                            "waits_slot", "make_slot",  "id_type",    "int_slot",   "tag_slot",
                            "tag_shift",  "maker",      "random_bits", "batch_type", "batch_slots",
                            "mask",       "texts",      "exhausted_slots", "placement", NULL};
    const char *kind;
    PyObject *owner, *pure, *run_slot, *tick_slot, *waits_slot, *make_slot, *id_type, *int_slot,
        *tag_slot, *maker, *batch_type, *batch_slots, *mask, *texts, *exhausted_slots, *placement;
    int tag_shift, bits;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "$sO!OOOOOO!OOiOiOOOOOO:HotPath", names, &kind, &PyType_Type, &owner,
            &pure, &run_slot, &tick_slot, &waits_slot, &make_slot, &PyType_Type, &id_type,
            &int_slot, &tag_slot, &tag_shift, &maker, &bits, &batch_type, &batch_slots, &mask,
            &texts, &exhausted_slots, &placement)) {
        return NULL;
    }
    int split = 0, high_shift = 0, low_shift = 0, noise_bits = 0;
    PyObject *fixed_obj = NULL;
    u128 fixed = 0;
    if (placement != Py_None) {
        if (!PyTuple_Check(placement) ||
            !PyArg_ParseTuple(placement, "iiiOi:placement", &split, &high_shift, &low_shift,
                              &fixed_obj, &noise_bits)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError,
                                "placement: (split, high_shift, low_shift, fixed, noise_bits)");
            }
            return NULL;
        }
        if (u128_from_int(fixed_obj, "placement's fixed bits", &fixed) < 0) {
            return NULL;
        }
        if (split < 0 || split > 127 || high_shift < 0 || high_shift > 127 || low_shift < 0 ||
            low_shift > 127 || noise_bits < 1 || noise_bits > 64) {
            PyErr_SetString(PyExc_ValueError, "a placement out of range");
            return NULL;
        }
    }
    int which;
    if (strcmp(kind, "generate") == 0) {
        which = GENERATE;
    }
    else if (strcmp(kind, "generate_nowait") == 0) {
        which = GENERATE_NOWAIT;
    }
    else if (strcmp(kind, "batch") == 0) {
        which = BATCH;
    }
    else if (strcmp(kind, "take") == 0) {
        which = TAKE; /* values of a run with no tick (muid's offsets): no clock, no batch */
    }
    else {
        PyErr_Format(PyExc_ValueError, "no hot path %s", kind);
        return NULL;
    }
    if (bits < 0 || bits > 64 || tag_shift < 1 || tag_shift > 127) {
        PyErr_SetString(PyExc_ValueError, "random_bits or tag_shift out of range");
        return NULL;
    }
    if (which == TAKE) {
        if (tick_slot != Py_None || waits_slot != Py_None || make_slot != Py_None || exhausted_slots != Py_None ||
            batch_type != Py_None || batch_slots != Py_None) {
            PyErr_SetString(PyExc_TypeError, "a take path has a run and values only");
            return NULL;
        }
    }
    else if (!PyType_Check(batch_type) || !PyTuple_Check(batch_slots) ||
             PyTuple_GET_SIZE(batch_slots) != 4) {
        PyErr_SetString(PyExc_TypeError, "batch_type, and batch_slots: _ints, _make, _mask, _texts");
        return NULL;
    }
    else if (!PyTuple_Check(exhausted_slots) || PyTuple_GET_SIZE(exhausted_slots) != 2) {
        PyErr_SetString(PyExc_TypeError, "exhausted_slots: exhausted_ticks, _exhausted_tick");
        return NULL;
    }
    PyTypeObject *owner_type = (PyTypeObject *)owner, *value_type = (PyTypeObject *)id_type;
    PyTypeObject *batch_cls = which == TAKE ? NULL : (PyTypeObject *)batch_type;
    if (value_type->tp_alloc == NULL || (value_type->tp_flags & Py_TPFLAGS_IS_ABSTRACT)) {
        PyErr_SetString(PyExc_TypeError, "the value type cannot be made with tp_alloc");
        return NULL;
    }
    HotPathObject *self = (HotPathObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = (vectorcallfunc)(which == BATCH  ? hot_batch
                                        : which == TAKE ? hot_take
                                                        : hot_generate);
    self->kind = which;
    if (which == TAKE) {
        self->tag_offset = -1;
        if ((self->run_offset = slot_offset(run_slot, owner_type, "run_slot")) < 0 ||
            (self->int_offset = slot_offset(int_slot, value_type, "int_slot")) < 0) {
            Py_DECREF(self);
            return NULL;
        }
    }
    else if ((self->run_offset = slot_offset(run_slot, owner_type, "run_slot")) < 0 ||
        (self->tick_offset = slot_offset(tick_slot, owner_type, "tick_slot")) < 0 ||
        (self->waits_offset = slot_offset(waits_slot, owner_type, "waits_slot")) < 0 ||
        (self->exhausted_offset = slot_offset(PyTuple_GET_ITEM(exhausted_slots, 0), owner_type,
                                              "exhausted_ticks")) < 0 ||
        (self->exhausted_tick_offset = slot_offset(PyTuple_GET_ITEM(exhausted_slots, 1),
                                                   owner_type, "_exhausted_tick")) < 0 ||
        (self->make_offset = slot_offset(make_slot, owner_type, "make_slot")) < 0 ||
        (self->int_offset = slot_offset(int_slot, value_type, "int_slot")) < 0 ||
        optional_offset(tag_slot, value_type, "tag_slot", &self->tag_offset) < 0 ||
        (self->batch_ints_offset =
             slot_offset(PyTuple_GET_ITEM(batch_slots, 0), batch_cls, "_ints")) < 0 ||
        (self->batch_make_offset =
             slot_offset(PyTuple_GET_ITEM(batch_slots, 1), batch_cls, "_make")) < 0 ||
        (self->batch_mask_offset =
             slot_offset(PyTuple_GET_ITEM(batch_slots, 2), batch_cls, "_mask")) < 0 ||
        (self->batch_texts_offset =
             slot_offset(PyTuple_GET_ITEM(batch_slots, 3), batch_cls, "_texts")) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->tag_shift = tag_shift;
    self->random_bits = bits;
    self->placed = placement != Py_None;
    self->place_split = split;
    self->place_high_shift = high_shift;
    self->place_low_shift = low_shift;
    self->place_fixed = fixed;
    self->place_low_mask = ((u128)1 << split) - 1;
    self->noise_bytes = (size_t)(noise_bits + 7) / 8;
    self->noise_mask = noise_bits == 64 ? UINT64_MAX : (((uint64_t)1 << noise_bits) - 1);
    Py_INCREF(owner);
    self->owner = owner_type;
    Py_INCREF(pure);
    self->pure = pure;
    Py_INCREF(id_type);
    self->id_type = value_type;
    if (maker != Py_None) {
        Py_INCREF(maker);
        self->maker = maker;
    }
    Py_XINCREF(batch_cls);
    self->batch_type = batch_cls;
    Py_INCREF(mask);
    self->mask = mask;
    Py_INCREF(texts);
    self->texts = texts;
    self->name = PyObject_GetAttrString(pure, "__name__");
    if (self->name == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
HotPath_traverse(HotPathObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->owner);
    Py_VISIT(self->pure);
    Py_VISIT(self->id_type);
    Py_VISIT(self->maker);
    Py_VISIT(self->batch_type);
    Py_VISIT(self->mask);
    Py_VISIT(self->texts);
    return 0;
}

static int
HotPath_clear(HotPathObject *self)
{
    Py_CLEAR(self->owner);
    Py_CLEAR(self->pure);
    Py_CLEAR(self->id_type);
    Py_CLEAR(self->maker);
    Py_CLEAR(self->batch_type);
    Py_CLEAR(self->mask);
    Py_CLEAR(self->texts);
    Py_CLEAR(self->name);
    return 0;
}

static void
HotPath_dealloc(HotPathObject *self)
{
    PyObject_GC_UnTrack(self);
    HotPath_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A method: bound to an instance when read from one (LOAD_METHOD skips this). */
static PyObject *
HotPath_get(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type))
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static PyObject *
HotPath_get_doc(HotPathObject *self, void *Py_UNUSED(closure))
{
    return PyObject_GetAttrString(self->pure, "__doc__");
}

static PyObject *
HotPath_get_wrapped(HotPathObject *self, void *Py_UNUSED(closure))
{
    Py_INCREF(self->pure);
    return self->pure;
}

static PyObject *
HotPath_get_name(HotPathObject *self, void *Py_UNUSED(closure))
{
    Py_INCREF(self->name);
    return self->name;
}

static PyObject *
HotPath_repr(HotPathObject *self)
{
    return PyUnicode_FromFormat("<compiled %U of %s>", self->name, self->owner->tp_name);
}

static PyGetSetDef HotPath_getset[] = {
    {"__doc__", (getter)HotPath_get_doc, NULL, NULL, NULL},
    {"__wrapped__", (getter)HotPath_get_wrapped, NULL, "The pure core's method.", NULL},
    {"__name__", (getter)HotPath_get_name, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef HotPath_methods[] = {
    {"make", (PyCFunction)HotPath_make, METH_O, "The value object made of a run value."},
    {"place_all", (PyCFunction)HotPath_place_all, METH_O,
     "The IDs of run values, placed with fresh random bits, as ints."},
    {"make_all", (PyCFunction)HotPath_make_all, METH_O,
     "The value objects of run values (a range or a list), as a list."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HotPathType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "idmint.generate._speedups.HotPath",
    .tp_basicsize = sizeof(HotPathObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "generate(), generate_nowait() or batch() of a generator class, compiled.",
    .tp_new = HotPath_new,
    .tp_dealloc = (destructor)HotPath_dealloc,
    .tp_traverse = (traverseproc)HotPath_traverse,
    .tp_clear = (inquiry)HotPath_clear,
    .tp_vectorcall_offset = offsetof(HotPathObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = HotPath_get,
    .tp_repr = (reprfunc)HotPath_repr,
    .tp_getset = HotPath_getset,
    .tp_methods = HotPath_methods,
};

/* -- batches --------------------------------------------------------------------------- */

/* The first value and step of a range (what ints_of and texts_of read of one). */
static int
range_parts(PyObject *values, u128 *first, u128 *step)
{
    PyObject *start_obj = PyObject_GetAttrString(values, "start");
    PyObject *step_obj = PyObject_GetAttrString(values, "step");
    int failed = start_obj == NULL || step_obj == NULL ||
                 u128_from_int(start_obj, "a batch's first value", first) < 0 ||
                 u128_from_int(step_obj, "a batch's step", step) < 0;
    Py_XDECREF(start_obj);
    Py_XDECREF(step_obj);
    return failed ? -1 : 0;
}


/* ints_of(values, mask): the ints of a batch kept as a range (masked: the bits a
 * scheme keeps above the ID dropped), as a list. Python's own list(range) steps
 * with PyNumber_Add once the values pass 2**63, which uid64's spread mode does
 * every other millisecond. */
static PyObject *
module_ints_of(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyRange_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "ints_of() takes a range and a mask (or None)");
        return NULL;
    }
    PyObject *values = args[0];
    u128 mask = ~(u128)0;
    if (args[1] != Py_None && u128_from_int(args[1], "mask", &mask) < 0) {
        return NULL;
    }
    Py_ssize_t length = PyObject_Size(values);
    if (length < 0) {
        return NULL;
    }
    PyObject *out = PyList_New(length);
    if (out == NULL || length == 0) {
        return out;
    }
    u128 first, step;
    if (range_parts(values, &first, &step) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < length; i++) {
        PyObject *number = int_from_u128((first + step * (u128)i) & mask);
        if (number == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, number);
    }
    return out;
}

/* texts_of(values, mask, form, digits): the text forms of a batch's ints (a range or
 * a list; masked), as a list of str: form 0 lowercase hex of ``digits`` digits,
 * zero-padded; form 1 decimal; form 2 the digits in base64's URL-safe alphabet
 * without leading zeros, the last ``digits`` of them moved to the front (short60's
 * display). core.py uses it only for a value type whose own text form it has
 * checked to be one of these. Values must fit in 64 bits once masked. */
static PyObject *
module_texts_of(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "texts_of() takes values, mask, form, digits");
        return NULL;
    }
    PyObject *values = args[0];
    u128 mask = ~(u128)0, first = 0, step = 0;
    long form = PyLong_AsLong(args[2]), digits = PyLong_AsLong(args[3]);
    if ((args[1] != Py_None && u128_from_int(args[1], "mask", &mask) < 0) ||
        (form == -1 && PyErr_Occurred()) || (digits == -1 && PyErr_Occurred())) {
        return NULL;
    }
    if (form < 0 || form > 2 || (form == 0 && (digits < 1 || digits > 16)) ||
        (form == 2 && (digits < 0 || digits > 11))) {
        PyErr_SetString(PyExc_ValueError, "texts_of(): no such form");
        return NULL;
    }
    int is_range = PyRange_Check(values);
    PyObject *listed = NULL;
    if (is_range) {
        if (range_parts(values, &first, &step) < 0) {
            return NULL;
        }
    }
    else if ((listed = PySequence_Fast(values, "texts_of() takes a range or a list")) == NULL) {
        return NULL;
    }
    Py_ssize_t length = is_range ? PyObject_Size(values) : PySequence_Fast_GET_SIZE(listed);
    PyObject *out = length < 0 ? NULL : PyList_New(length);
    if (out == NULL) {
        Py_XDECREF(listed);
        return NULL;
    }
    static const char hex[] = "0123456789abcdef";
    static const char base64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (Py_ssize_t i = 0; i < length; i++) {
        u128 wide;
        if (is_range) {
            wide = first + step * (u128)i;
        }
        else if (u128_from_int(PySequence_Fast_GET_ITEM(listed, i), "an ID", &wide) < 0) {
            goto failed;
        }
        wide &= mask;
        if (wide >> 64) {
            PyErr_SetString(PyExc_OverflowError, "texts_of(): an ID of more than 64 bits");
            goto failed;
        }
        uint64_t value = (uint64_t)wide;
        char text[20];
        int used = 0;
        if (form == 0) {
            for (int at = (int)digits - 1; at >= 0; at--, value >>= 4) {
                text[at] = hex[value & 15];
            }
            if (value) {
                PyErr_SetString(PyExc_OverflowError, "texts_of(): an ID wider than its digits");
                goto failed;
            }
            used = (int)digits;
        }
        else {
            int base = form == 1 ? 10 : 64;
            char reversed[24];
            do {
                reversed[used++] = form == 1 ? (char)('0' + value % 10) : base64[value & 63];
                value /= (uint64_t)base;
            } while (value);
            /* form 2: the last ``digits`` digits (the first in ``reversed``) go first */
            int moved = form == 2 ? (digits < used ? (int)digits : used) : 0;
            for (int at = 0; at < moved; at++) {
                text[at] = reversed[moved - 1 - at];
            }
            for (int at = moved; at < used; at++) {
                text[at] = reversed[used - 1 - (at - moved)];
            }
        }
        PyObject *item = PyUnicode_New(used, 127);
        if (item == NULL) {
            goto failed;
        }
        memcpy(PyUnicode_1BYTE_DATA(item), text, (size_t)used);
        PyList_SET_ITEM(out, i, item);
    }
    Py_XDECREF(listed);
    return out;
failed:
    Py_XDECREF(listed);
    Py_DECREF(out);
    return NULL;
}

/* -- the module ---------------------------------------------------------------------- */

static PyObject *
module_forks(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(forks);
}

static PyObject *
module_configure(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"spin_ns", "slice_ns", "step_slack_ns", NULL};
    long long spin, slice, slack;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$LLL:configure", names, &spin, &slice,
                                     &slack)) {
        return NULL;
    }
    if (spin < 0 || slice <= 0 || slack < 0) {
        PyErr_SetString(PyExc_ValueError, "waiting constants out of range");
        return NULL;
    }
    spin_ns = spin;
    slice_ns = slice;
    step_slack_ns = slack;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"ints_of", (PyCFunction)(void (*)(void))module_ints_of, METH_FASTCALL,
     "The ints of a range (masked), as a list."},
    {"texts_of", (PyCFunction)(void (*)(void))module_texts_of, METH_FASTCALL,
     "The text forms (hex or decimal) of a batch's ints."},
    {"forks", module_forks, METH_NOARGS,
     "How many fork()s separate this process from the one that loaded the module."},
    {"configure", (PyCFunction)(void (*)(void))module_configure, METH_VARARGS | METH_KEYWORDS,
     "Set the waiting constants (clock.py's)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "idmint.generate._speedups",
    .m_doc = "The compiled core of idmint's tick generators (see core.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    for (int byte = 0; byte < 256; byte++) {
        uint8_t out = 0;
        for (int bit = 0; bit < 8; bit++) {
            out = (uint8_t)(out | (((byte >> bit) & 1) << (7 - bit)));
        }
        reversed_bytes[byte] = out;
    }
    if (PyType_Ready(&LayoutType) < 0 || PyType_Ready(&RunType) < 0 ||
        PyType_Ready(&HotPathType) < 0) {
        return NULL;
    }
    if ((str_time_ns = PyUnicode_InternFromString("time_ns")) == NULL ||
        (str_monotonic_ns = PyUnicode_InternFromString("monotonic_ns")) == NULL ||
        (str_sleep_until_ns = PyUnicode_InternFromString("sleep_until_ns")) == NULL ||
        (str_generate_slow = PyUnicode_InternFromString("_generate_slow")) == NULL ||
        (str_batch_rest = PyUnicode_InternFromString("_batch_rest")) == NULL ||
        (int_zero = PyLong_FromLong(0)) == NULL || (int_one = PyLong_FromLong(1)) == NULL ||
        (int_sixty_four = PyLong_FromLong(64)) == NULL) {
        return NULL;
    }
#ifdef IDM_DIGITS
    if ((digits_agree = check_digits()) < 0) {
        return NULL;
    }
#endif
    static int fork_handler_set = 0;
    if (!fork_handler_set) {
        int status = pthread_atfork(NULL, NULL, count_fork_in_child);
        if (status != 0) {
            errno = status;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        fork_handler_set = 1;
    }
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) {
        return NULL;
    }
    if (PyModule_AddStringConstant(mod, "source_sha256", IDMINT_SOURCE_SHA256) < 0 ||
        PyModule_AddObjectRef(mod, "Layout", (PyObject *)&LayoutType) < 0 ||
        PyModule_AddObjectRef(mod, "Run", (PyObject *)&RunType) < 0 ||
        PyModule_AddObjectRef(mod, "HotPath", (PyObject *)&HotPathType) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
