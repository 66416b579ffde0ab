/* The LETOR text scanner, compiled when the package is installed (setup.py builds it).
 *
 * datamodules/letor_text.py is its Python face and documents the rules it applies (stated in
 * docs/data.md); the result layout and error codes below are exported to it as module
 * constants, so they are written once, here. Plain CPython C API: arrays come in through the
 * buffer protocol (no numpy headers, no build dependency), and the scanning loops release the
 * GIL, so the reader's threads scan chunks of one file in parallel.
 *
 * Functions:
 *   scan(out, buf, fill, features, labels, qids, lines, doc_start, doc_end,
 *        null_rows, null_cols, present, pow10) -> None   (fills out, int64 [R_SIZE])
 *   capacity(buf) -> (rows, nulls)                         (upper bounds for a fill)
 *   parse_value(buf, i, n, pow10) -> (value, end)          (end -1: not a number)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_LABEL 31
#define MAX_QID_DIGITS 18 /* < 2**63: every qid fits int64 */
#define MAX_FEATURE_INDEX 2147483647LL /* 2**31 - 1 */
#define POW10_SIZE 23 /* 10**0 .. 10**22, every one exact in float64 */

/* Error codes (messages in differank.datamodules.reader). */
enum {
    OK = 0,
    BAD_LABEL = 1,
    LABEL_TOO_LARGE = 2,
    NO_QID = 3,
    BAD_QID = 4,
    BAD_FEATURE = 5,
    BAD_INDEX = 6,
    INDEX_ORDER = 7,
    BAD_VALUE = 8,
    INDEX_TOO_LARGE = 9,
    /* a row does not fit the arrays: the file changed since it was counted, or a single-pass
       fill met a feature index beyond the width it was given */
    CHANGED = 10,
};

/* Layout of the int64 result vector of scan. */
enum {
    R_ROWS, R_LINES, R_MAX_INDEX, R_NULLS, R_NONFINITE, R_NONFINITE_LINE, R_NONFINITE_COL,
    R_ERROR, R_ERROR_LINE, R_ERROR_POS,
    R_NONFINITE_BITS, /* the first non-finite value as written (float64 bits) */
    R_SIZE,
};

static int is_space(uint8_t c) { return c == ' ' || c == '\t'; }

static int is_eol(uint8_t c) { return c == '\n' || c == '\r'; }

static int ends_token(uint8_t c) { return is_space(c) || is_eol(c) || c == '#'; }

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* Does buf[i:] start with word (lower-case ASCII, compared case-insensitively)? */
static int match_word(const uint8_t *buf, Py_ssize_t i, Py_ssize_t n, const char *word)
{
    Py_ssize_t length = (Py_ssize_t)strlen(word);
    if (i + length > n)
        return 0;
    for (Py_ssize_t k = 0; k < length; k++) {
        uint8_t c = buf[i + k];
        if ((c >= 'A' && c <= 'Z' ? c + 32 : c) != (uint8_t)word[k])
            return 0;
    }
    return 1;
}

/* base ** exponent by repeated squaring: the rounding of numba's float ** int, which the
   scanner used before it was written in C, so the parsed values are the same to the bit. */
static double int_power(double base, int64_t exponent)
{
    int invert = exponent < 0;
    uint64_t remaining = (uint64_t)(invert ? -exponent : exponent);
    double result = 1.0;
    while (remaining != 0) {
        if (remaining & 1)
            result *= base;
        remaining >>= 1;
        base *= base;
    }
    return invert ? 1.0 / result : result;
}

/* A decimal number at buf[i]: its value, and *end (-1 if it is not one).
 *
 * Accepts [+-] digits with an optional '.' fraction and e/E exponent, or nan / inf / infinity
 * (any case). Up to 19 significant digits are kept; the value is the float64 nearest to them
 * (exact for up to 15 digits and exponents within 1e+-22). */
static double parse_value(const uint8_t *buf, Py_ssize_t i, Py_ssize_t n, const double *pow10,
                          Py_ssize_t *end)
{
    int negative = 0;
    double value;
    if (i < n && (buf[i] == '+' || buf[i] == '-')) {
        negative = buf[i] == '-';
        i++;
    }
    if (match_word(buf, i, n, "infinity")) {
        value = INFINITY;
        *end = i + 8;
    } else if (match_word(buf, i, n, "inf")) {
        value = INFINITY;
        *end = i + 3;
    } else if (match_word(buf, i, n, "nan")) {
        value = NAN;
        *end = i + 3;
    } else {
        uint64_t mantissa = 0;
        int significant = 0;
        int64_t digits = 0, exponent = 0;
        for (; i < n && is_digit(buf[i]); i++, digits++) {
            if (significant < 19) {
                mantissa = mantissa * 10 + (uint64_t)(buf[i] - '0');
                if (mantissa > 0)
                    significant++;
            } else {
                exponent++;
            }
        }
        if (i < n && buf[i] == '.') {
            for (i++; i < n && is_digit(buf[i]); i++, digits++) {
                if (significant < 19) {
                    mantissa = mantissa * 10 + (uint64_t)(buf[i] - '0');
                    exponent--;
                    if (mantissa > 0)
                        significant++;
                }
            }
        }
        if (digits == 0) {
            *end = -1;
            return 0.0;
        }
        if (i < n && (buf[i] == 'e' || buf[i] == 'E')) {
            int exp_negative = 0;
            int64_t exp_digits = 0, written = 0;
            i++;
            if (i < n && (buf[i] == '+' || buf[i] == '-')) {
                exp_negative = buf[i] == '-';
                i++;
            }
            for (; i < n && is_digit(buf[i]); i++, exp_digits++) {
                if (written < 100000)
                    written = written * 10 + (buf[i] - '0');
            }
            if (exp_digits == 0) {
                *end = -1;
                return 0.0;
            }
            exponent += exp_negative ? -written : written;
        }
        const uint64_t exact = (uint64_t)1 << 53; /* every integer below is a float64 */
        if (mantissa == 0)
            value = 0.0;
        else if (exponent >= 0 && exponent <= 22 && mantissa < exact)
            value = (double)mantissa * pow10[exponent];
        else if (exponent >= -22 && exponent < 0 && mantissa < exact)
            value = (double)mantissa / pow10[-exponent];
        else if (exponent > 330)
            value = INFINITY;
        else if (exponent < -360)
            value = 0.0;
        else if (exponent < -300) /* 10**exponent alone would be subnormal or 0 */
            value = (double)mantissa * 1e-300 * int_power(10.0, exponent + 300);
        else
            value = (double)mantissa * int_power(10.0, exponent);
        *end = i;
    }
    if (*end < n && !ends_token(buf[*end])) {
        *end = -1;
        return 0.0;
    }
    return negative ? -value : value;
}

/* Where a row is written: arrays sized by a counting scan, or by capacity() and a width. */
typedef struct {
    int fill;
    Py_ssize_t rows, width, null_capacity;
    float *features; /* [rows, width] */
    uint8_t *labels;
    int64_t *qids, *lines, *doc_start, *doc_end, *null_rows, *null_cols;
    uint8_t *present; /* numpy bool: one byte, 0 or 1 */
} Outputs;

/* The doc id in the comment buf[start:end]: the token after "docid =", else the whole
   comment without surrounding blanks. */
static void docid_span(const uint8_t *buf, Py_ssize_t start, Py_ssize_t end, const Outputs *o,
                       Py_ssize_t row)
{
    for (Py_ssize_t k = start; k < end - 4; k++) {
        if (memcmp(buf + k, "docid", 5) != 0)
            continue;
        Py_ssize_t j = k + 5;
        while (j < end && is_space(buf[j]))
            j++;
        if (j < end && buf[j] == '=') {
            j++;
            while (j < end && is_space(buf[j]))
                j++;
            Py_ssize_t first = j;
            while (j < end && !is_space(buf[j]))
                j++;
            if (j > first) {
                o->doc_start[row] = first;
                o->doc_end[row] = j;
                return;
            }
        }
    }
    while (start < end && is_space(buf[start]))
        start++;
    while (end > start && is_space(buf[end - 1]))
        end--;
    o->doc_start[row] = start;
    o->doc_end[row] = end;
}

static int64_t float_bits(double value)
{
    int64_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

/* Stop at the first bad token: its error code, line and byte offset. */
#define FAIL(code, where)           \
    do {                            \
        out[R_ERROR] = (code);      \
        out[R_ERROR_LINE] = line;   \
        out[R_ERROR_POS] = (where); \
        return;                     \
    } while (0)

/* Scan whole lines of buf into out (int64 [R_SIZE], zeroed by the caller). Line numbers are
   1-based within buf; R_ERROR_POS is the byte offset of the bad token. */
static void scan_lines(const uint8_t *buf, Py_ssize_t n, const Outputs *o, const double *pow10,
                       int64_t *out)
{
    Py_ssize_t i = 0, start;
    int64_t row = 0, line = 0, nulls = 0, max_index = 0;
    while (i < n) {
        line++;
        /* leading blanks; blank and comment-only lines hold no row */
        while (i < n && is_space(buf[i]))
            i++;
        if (i >= n || is_eol(buf[i]) || buf[i] == '#') {
            while (i < n && !is_eol(buf[i]))
                i++;
            if (i < n && buf[i] == '\r' && i + 1 < n && buf[i + 1] == '\n')
                i++;
            i++;
            continue;
        }
        /* label: digits only, 0..MAX_LABEL */
        start = i;
        int64_t label = 0;
        for (; i < n && is_digit(buf[i]); i++) {
            if (label <= MAX_LABEL)
                label = label * 10 + (buf[i] - '0');
        }
        if (i == start || (i < n && !ends_token(buf[i])))
            FAIL(BAD_LABEL, start);
        if (label > MAX_LABEL)
            FAIL(LABEL_TOO_LARGE, start);
        /* qid:<digits>, no leading zero, at most MAX_QID_DIGITS digits */
        while (i < n && is_space(buf[i]))
            i++;
        start = i;
        if (!(i + 4 <= n && memcmp(buf + i, "qid:", 4) == 0))
            FAIL(NO_QID, start);
        i += 4;
        int64_t qid = 0, digits = 0;
        for (; i < n && is_digit(buf[i]); i++, digits++) {
            if (digits < MAX_QID_DIGITS)
                qid = qid * 10 + (buf[i] - '0');
        }
        if (digits == 0 || digits > MAX_QID_DIGITS || (digits > 1 && buf[start + 4] == '0') ||
            (i < n && !ends_token(buf[i])))
            FAIL(BAD_QID, start);
        if (o->fill && row >= o->rows)
            FAIL(CHANGED, start);
        if (o->fill) {
            o->labels[row] = (uint8_t)label;
            o->qids[row] = qid;
            o->lines[row] = line;
            o->doc_start[row] = 0;
            o->doc_end[row] = 0;
        }
        /* features index:value, indices 1-based and increasing */
        int64_t previous = 0;
        for (;;) {
            while (i < n && is_space(buf[i]))
                i++;
            if (i >= n || is_eol(buf[i]))
                break;
            if (buf[i] == '#') { /* the rest of the line is a comment */
                Py_ssize_t comment = i + 1;
                while (i < n && !is_eol(buf[i]))
                    i++;
                if (o->fill)
                    docid_span(buf, comment, i, o, row);
                break;
            }
            start = i;
            int64_t index = 0;
            digits = 0;
            for (; i < n && is_digit(buf[i]); i++, digits++) {
                if (index <= MAX_FEATURE_INDEX)
                    index = index * 10 + (buf[i] - '0');
            }
            if (i >= n || buf[i] != ':') { /* no ':' right after the digits */
                while (i < n && !ends_token(buf[i]) && buf[i] != ':')
                    i++;
                FAIL(i < n && buf[i] == ':' ? BAD_INDEX : BAD_FEATURE, start);
            }
            if (digits == 0 || index == 0)
                FAIL(BAD_INDEX, start);
            if (index > MAX_FEATURE_INDEX)
                FAIL(INDEX_TOO_LARGE, start);
            if (o->fill && index > o->width)
                FAIL(CHANGED, start);
            if (index <= previous)
                FAIL(INDEX_ORDER, start);
            previous = index;
            i++; /* ':' */
            if (i + 4 <= n && memcmp(buf + i, "NULL", 4) == 0 &&
                (i + 4 == n || ends_token(buf[i + 4]))) {
                i += 4;
                if (o->fill && nulls >= o->null_capacity)
                    FAIL(CHANGED, start);
                if (o->fill) {
                    o->null_rows[nulls] = row;
                    o->null_cols[nulls] = index - 1;
                    o->features[row * o->width + index - 1] = NAN;
                    o->present[index - 1] = 1;
                }
                nulls++;
            } else {
                Py_ssize_t end;
                double value = parse_value(buf, i, n, pow10, &end);
                if (end < 0)
                    FAIL(BAD_VALUE, start);
                i = end;
                /* Stored as float32: a value beyond its range (|x| > 3.4e38) becomes inf, so
                   it is as non-finite as a written inf. */
                float stored = (float)value;
                if (!isfinite(stored)) {
                    if (out[R_NONFINITE] == 0) {
                        out[R_NONFINITE_LINE] = line;
                        out[R_NONFINITE_COL] = index;
                        out[R_NONFINITE_BITS] = float_bits(value);
                    }
                    out[R_NONFINITE]++;
                }
                if (o->fill) {
                    o->features[row * o->width + index - 1] = stored;
                    o->present[index - 1] = 1;
                }
            }
            if (index > max_index)
                max_index = index;
        }
        row++;
        if (i < n && buf[i] == '\r' && i + 1 < n && buf[i + 1] == '\n')
            i++;
        i++;
    }
    out[R_ROWS] = row;
    out[R_LINES] = line;
    out[R_MAX_INDEX] = max_index;
    out[R_NULLS] = nulls;
}

/* ---- the Python face: buffers checked before any byte is written ---------------------- */

/* A C-contiguous buffer of ndim dimensions and items of `itemsize` bytes whose kind (struct
   format letter, ignoring byte-order prefixes) is one of `kinds`; a TypeError names it. */
static int get_array(PyObject *object, Py_buffer *view, const char *name, int ndim,
                     Py_ssize_t itemsize, const char *kinds, int writable)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, view, flags) < 0) {
        PyErr_Clear(); /* e.g. numpy's "ndarray is not C-contiguous", which names no array */
        PyErr_Format(PyExc_TypeError, "%s must be a %sC-contiguous array, got %R", name,
                     writable ? "writable " : "", Py_TYPE(object));
        return -1;
    }
    const char *written = view->format ? view->format : "B"; /* NULL means unsigned bytes */
    const char *format = written;
    if (format[0] != '\0' && strchr("@=<>!", format[0]) != NULL)
        format++; /* a byte-order prefix */
    if (view->ndim != ndim || view->itemsize != itemsize || format[0] == '\0' ||
        format[1] != '\0' || strchr(kinds, format[0]) == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be a C-contiguous %d-d array of %zd-byte items of kind '%s', "
                     "got %d-d of format '%s'",
                     name, ndim, itemsize, kinds, view->ndim, written);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static int get_pow10(PyObject *object, Py_buffer *view)
{
    if (get_array(object, view, "pow10", 1, 8, "d", 0) < 0)
        return -1;
    if (view->shape[0] < POW10_SIZE) {
        PyErr_Format(PyExc_ValueError, "pow10 must hold 10**0 .. 10**22 (%d values), got %zd",
                     POW10_SIZE, view->shape[0]);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

enum { A_OUT, A_BUF, A_FEATURES, A_LABELS, A_QIDS, A_LINES, A_DOC_START, A_DOC_END,
       A_NULL_ROWS, A_NULL_COLS, A_PRESENT, A_POW10, A_COUNT };

static PyObject *py_scan(PyObject *self, PyObject *args)
{
    PyObject *objects[A_COUNT];
    int fill;
    if (!PyArg_ParseTuple(args, "OOpOOOOOOOOOO:scan", &objects[A_OUT], &objects[A_BUF], &fill,
                          &objects[A_FEATURES], &objects[A_LABELS], &objects[A_QIDS],
                          &objects[A_LINES], &objects[A_DOC_START], &objects[A_DOC_END],
                          &objects[A_NULL_ROWS], &objects[A_NULL_COLS], &objects[A_PRESENT],
                          &objects[A_POW10]))
        return NULL;
    static const char *names[A_COUNT] = {"out", "buf", "features", "labels", "qids", "lines",
                                         "doc_start", "doc_end", "null_rows", "null_cols",
                                         "present", "pow10"};
    Py_buffer views[A_COUNT];
    int got = 0, ok = 1;
    for (; got < A_COUNT && ok; got++) {
        PyObject *object = objects[got];
        Py_buffer *view = &views[got];
        const char *name = names[got];
        switch (got) {
        case A_OUT:
            ok = get_array(object, view, name, 1, 8, "ql", 1) == 0;
            if (ok && view->shape[0] != R_SIZE) {
                PyErr_Format(PyExc_ValueError, "scan: out must hold %d int64", R_SIZE);
                PyBuffer_Release(view);
                ok = 0;
            }
            break;
        case A_BUF:
            ok = get_array(object, view, name, 1, 1, "Bbc", 0) == 0;
            break;
        case A_FEATURES:
            ok = get_array(object, view, name, 2, 4, "f", 1) == 0;
            break;
        case A_LABELS:
            ok = get_array(object, view, name, 1, 1, "B", 1) == 0;
            break;
        case A_PRESENT:
            ok = get_array(object, view, name, 1, 1, "?", 1) == 0;
            break;
        case A_POW10:
            ok = get_pow10(object, view) == 0;
            break;
        default: /* the int64 arrays */
            ok = get_array(object, view, name, 1, 8, "ql", 1) == 0;
        }
    }
    if (!ok) {
        got--; /* the failed one released its own view */
        goto release;
    }
    Outputs o = {
        .fill = fill,
        .rows = views[A_LABELS].shape[0],
        .width = views[A_PRESENT].shape[0],
        .null_capacity = views[A_NULL_ROWS].shape[0],
        .features = views[A_FEATURES].buf,
        .labels = views[A_LABELS].buf,
        .qids = views[A_QIDS].buf,
        .lines = views[A_LINES].buf,
        .doc_start = views[A_DOC_START].buf,
        .doc_end = views[A_DOC_END].buf,
        .null_rows = views[A_NULL_ROWS].buf,
        .null_cols = views[A_NULL_COLS].buf,
        .present = views[A_PRESENT].buf,
    };
    int rows_agree = views[A_FEATURES].shape[0] == o.rows;
    for (int k = A_QIDS; k <= A_DOC_END; k++)
        rows_agree = rows_agree && views[k].shape[0] == o.rows;
    if (!rows_agree || views[A_FEATURES].shape[1] != o.width ||
        views[A_NULL_COLS].shape[0] != o.null_capacity) {
        PyErr_SetString(PyExc_ValueError,
                        "scan: features [rows, F], labels / qids / lines / doc_start / doc_end "
                        "[rows], null_rows / null_cols [nulls] and present [F] must agree");
        ok = 0;
        goto release;
    }
    int64_t *out = views[A_OUT].buf;
    memset(out, 0, R_SIZE * sizeof *out);
    Py_BEGIN_ALLOW_THREADS
    scan_lines(views[A_BUF].buf, views[A_BUF].shape[0], &o, views[A_POW10].buf, out);
    Py_END_ALLOW_THREADS
release:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&views[k]);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_capacity(PyObject *self, PyObject *object)
{
    Py_buffer view;
    if (get_array(object, &view, "buf", 1, 1, "Bbc", 0) < 0)
        return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t line_ends = 0, capitals = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < view.shape[0]; i++) {
        line_ends += is_eol(buf[i]);
        capitals += buf[i] == 'N';
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(nn)", line_ends + 1, capitals);
}

static PyObject *py_parse_value(PyObject *self, PyObject *args)
{
    PyObject *buf_object, *pow10_object;
    Py_ssize_t i, n, end;
    if (!PyArg_ParseTuple(args, "OnnO:parse_value", &buf_object, &i, &n, &pow10_object))
        return NULL;
    Py_buffer buf, pow10;
    if (get_array(buf_object, &buf, "buf", 1, 1, "Bbc", 0) < 0)
        return NULL;
    if (get_pow10(pow10_object, &pow10) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (i < 0 || n > buf.shape[0]) {
        PyErr_Format(PyExc_ValueError, "parse_value: i >= 0 and n <= len(buf) (%zd) needed",
                     buf.shape[0]);
        PyBuffer_Release(&buf);
        PyBuffer_Release(&pow10);
        return NULL;
    }
    double value = parse_value(buf.buf, i, n, pow10.buf, &end);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&pow10);
    return Py_BuildValue("(dn)", value, end);
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS,
     "scan(out, buf, fill, features, labels, qids, lines, doc_start, doc_end, null_rows, "
     "null_cols, present, pow10): scan whole lines of buf into out (int64 [R_SIZE])"},
    {"capacity", py_capacity, METH_O,
     "capacity(buf) -> (rows, nulls): upper bounds on what scan finds in buf"},
    {"parse_value", py_parse_value, METH_VARARGS,
     "parse_value(buf, i, n, pow10) -> (value, end): the number at buf[i]; end -1 if none"},
    {NULL, NULL, 0, NULL},
};

static int add_constants(PyObject *module)
{
    static const struct {
        const char *name;
        long value;
    } constants[] = {
        {"MAX_LABEL", MAX_LABEL},
        {"MAX_QID_DIGITS", MAX_QID_DIGITS},
        {"MAX_FEATURE_INDEX", (long)MAX_FEATURE_INDEX},
        {"OK", OK},
        {"BAD_LABEL", BAD_LABEL},
        {"LABEL_TOO_LARGE", LABEL_TOO_LARGE},
        {"NO_QID", NO_QID},
        {"BAD_QID", BAD_QID},
        {"BAD_FEATURE", BAD_FEATURE},
        {"BAD_INDEX", BAD_INDEX},
        {"INDEX_ORDER", INDEX_ORDER},
        {"BAD_VALUE", BAD_VALUE},
        {"INDEX_TOO_LARGE", INDEX_TOO_LARGE},
        {"CHANGED", CHANGED},
        {"R_ROWS", R_ROWS},
        {"R_LINES", R_LINES},
        {"R_MAX_INDEX", R_MAX_INDEX},
        {"R_NULLS", R_NULLS},
        {"R_NONFINITE", R_NONFINITE},
        {"R_NONFINITE_LINE", R_NONFINITE_LINE},
        {"R_NONFINITE_COL", R_NONFINITE_COL},
        {"R_ERROR", R_ERROR},
        {"R_ERROR_LINE", R_ERROR_LINE},
        {"R_ERROR_POS", R_ERROR_POS},
        {"R_NONFINITE_BITS", R_NONFINITE_BITS},
        {"R_SIZE", R_SIZE},
        {"POW10_SIZE", POW10_SIZE},
    };
    for (size_t k = 0; k < sizeof constants / sizeof constants[0]; k++) {
        if (PyModule_AddIntConstant(module, constants[k].name, constants[k].value) < 0)
            return -1;
    }
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, add_constants},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "differank.datamodules._letor_text",
    .m_doc = "The compiled LETOR text scanner (see differank.datamodules.letor_text).",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__letor_text(void) { return PyModuleDef_Init(&module_def); }
