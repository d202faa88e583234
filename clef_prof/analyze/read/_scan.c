/* clef_prof.analyze.read._scan: the columns of an SQLite query, read in C without the GIL.
 *
 * Why a reader of our own: through ADBC a big export costs about 1.5 times SQLite's own scan of
 * the same values (Arrow validity bitmaps set one bit a value, type inference, a mutex per
 * column call; docs/speed.md). This loop steps the statement and writes each integer straight
 * into a growing int64 buffer (realloc doubles it; glibc moves big blocks with mremap, no copy):
 * the column's value and its type read once, on a connection opened without mutexes (one
 * connection per thread, enforced by `busy`, so the unprotected sqlite3_value is safe to read;
 * reading it once costs about a quarter less than sqlite3_column_type + sqlite3_column_int64,
 * measured). The GIL is released for the whole query, so reader threads run side by side; on
 * the main thread (signals=True) a progress handler takes it back every few million VM steps
 * to run signal handlers (Ctrl-C), and interrupt() stops a read from another thread.
 *
 * Conn(uri).read(sql, kinds, signals=False) -> (rows, [column, ...]), kinds one letter a column:
 * 'i' an integer column, its values as native int64 (NULL read as 0) in a buffer NumPy reads
 * without a copy; 's' a text column, a list of str (NULL read as '', a number as SQLite writes
 * it, a blob's bytes as UTF-8; bytes that are not UTF-8 as U+FFFD). One read-only statement:
 * a REAL, TEXT or BLOB value in an integer column raises Mismatch(column index, type name);
 * anything else SQLite or this module refuses raises Error(message). Optional: built where a C
 * compiler and Python's headers are (setup.py); without it clef-prof reads the same values
 * through ADBC or sqlite3. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if !defined(CLEF_SCAN_OWN_DECLS) && defined(__has_include)
#if __has_include(<sqlite3.h>)
#include <sqlite3.h>
#define CLEF_SCAN_HAVE_HEADER 1
#endif
#endif
#ifndef CLEF_SCAN_HAVE_HEADER
/* Without sqlite3.h (no libsqlite3-dev: only the runtime library Python's sqlite3 links): the
 * part of SQLite's C interface used here, as sqlite3.h declares it (stable since 3.7). */
typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
typedef struct sqlite3_value sqlite3_value;
typedef long long int sqlite3_int64;
#define SQLITE_OK 0
#define SQLITE_ROW 100
#define SQLITE_DONE 101
#define SQLITE_INTEGER 1
#define SQLITE_FLOAT 2
#define SQLITE_TEXT 3
#define SQLITE_BLOB 4
#define SQLITE_NULL 5
#define SQLITE_OPEN_READONLY 0x00000001
#define SQLITE_OPEN_URI 0x00000040
#define SQLITE_OPEN_NOMUTEX 0x00008000
int sqlite3_open_v2(const char *filename, sqlite3 **db, int flags, const char *vfs);
int sqlite3_close(sqlite3 *db);
const char *sqlite3_errmsg(sqlite3 *db);
int sqlite3_prepare_v2(sqlite3 *db, const char *sql, int nbyte, sqlite3_stmt **stmt, const char **tail);
int sqlite3_step(sqlite3_stmt *stmt);
int sqlite3_finalize(sqlite3_stmt *stmt);
int sqlite3_stmt_readonly(sqlite3_stmt *stmt);
int sqlite3_column_count(sqlite3_stmt *stmt);
sqlite3_value *sqlite3_column_value(sqlite3_stmt *stmt, int i);
const unsigned char *sqlite3_column_text(sqlite3_stmt *stmt, int i);
const void *sqlite3_column_blob(sqlite3_stmt *stmt, int i);
int sqlite3_column_bytes(sqlite3_stmt *stmt, int i);
int sqlite3_value_type(sqlite3_value *v);
sqlite3_int64 sqlite3_value_int64(sqlite3_value *v);
void sqlite3_progress_handler(sqlite3 *db, int n, int (*callback)(void *), void *arg);
void sqlite3_interrupt(sqlite3 *db);
const char *sqlite3_libversion(void);
int sqlite3_threadsafe(void);
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_ROWS 4096
#define PROGRESS_STEPS (1 << 22)

static PyObject *ScanError;
static PyObject *ScanMismatch;

/* An SQLite message as Error: decoded with U+FFFD for bytes that are not UTF-8 (it may quote
 * names from the file, or be cut inside a character). */
static void set_error(const char *msg)
{
    PyObject *u = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (u != NULL) {
        PyErr_SetObject(ScanError, u);
        Py_DECREF(u);
    }
}

/* One column's values, owned here and lent through the buffer protocol: NumPy views them
 * without a copy, and the memory is freed when the last view goes. */
typedef struct {
    PyObject_HEAD
    int64_t *data;
    Py_ssize_t len;          /* values */
} Column;

static int Column_getbuffer(Column *self, Py_buffer *view, int flags)
{
    static int64_t empty;
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->data ? (void *)self->data : (void *)&empty,
                          self->len * (Py_ssize_t)sizeof(int64_t), 0, flags) < 0)
        return -1;
    view->itemsize = sizeof(int64_t);
    if (flags & PyBUF_FORMAT)
        view->format = "q";
    if (flags & PyBUF_ND) {
        view->ndim = 1;
        view->shape = &self->len;
    }
    if (flags & PyBUF_STRIDES)
        view->strides = &view->itemsize;
    return 0;
}

static void Column_dealloc(Column *self)
{
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Column_as_buffer = {(getbufferproc)Column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "clef_prof.analyze.read._scan.Column",
    .tp_doc = "One column's int64 values (a buffer: read it with numpy.frombuffer).",
    .tp_basicsize = sizeof(Column),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Column_dealloc,
    .tp_as_buffer = &Column_as_buffer,
};

typedef struct {
    int64_t *v;              /* an integer column's values; a text column's end offsets in txt */
    char *txt;               /* a text column's UTF-8 bytes, back to back */
    size_t tlen, tcap;
    char kind;               /* 'i' integer, 's' text */
} Col;

typedef struct {
    Col *cols;
    int ncols;
    size_t rows, cap;
    int bad_col, bad_type;   /* the first value that is not an integer or NULL */
    int nomem, interrupted;
    char err[512];           /* the message of a refusal, empty when none */
} Scan;

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    int busy;
} Conn;

/* A connection serves one thread at a time: true, with Error set, while it reads on another. */
static int refused_busy(const Conn *self)
{
    if (self->busy)
        PyErr_SetString(ScanError, "the connection is reading on another thread");
    return self->busy;
}

static const char *type_name(int t)
{
    switch (t) {
    case SQLITE_FLOAT: return "real";
    case SQLITE_TEXT: return "text";
    case SQLITE_BLOB: return "blob";
    default: return "unknown";
    }
}

static void scan_free(Scan *s)
{
    for (int i = 0; s->cols != NULL && i < s->ncols; i++) {
        free(s->cols[i].v);
        free(s->cols[i].txt);
    }
    free(s->cols);
    s->cols = NULL;
}

static int scan_grow(Scan *s)
{
    size_t cap = s->cap ? s->cap * 2 : FIRST_ROWS;
    if (cap > ((size_t)PY_SSIZE_T_MAX) / sizeof(int64_t))
        return -1;
    for (int i = 0; i < s->ncols; i++) {
        int64_t *p = realloc(s->cols[i].v, cap * sizeof(int64_t));
        if (p == NULL)
            return -1;
        s->cols[i].v = p;
    }
    s->cap = cap;
    return 0;
}

static int text_append(Col *c, const unsigned char *p, size_t n)
{
    if (c->tlen + n > c->tcap) {
        size_t cap = c->tcap ? c->tcap : 4096;
        while (cap < c->tlen + n) {
            if (cap > ((size_t)PY_SSIZE_T_MAX) / 2)
                return -1;
            cap *= 2;
        }
        char *q = realloc(c->txt, cap);
        if (q == NULL)
            return -1;
        c->txt = q;
        c->tcap = cap;
    }
    if (n)
        memcpy(c->txt + c->tlen, p, n);
    c->tlen += n;
    return 0;
}

/* SQLite's progress handler, every PROGRESS_STEPS VM steps: a signal's Python handler runs
 * (on the main thread) and, if it raised, the query stops with that exception set. */
static int scan_progress(void *arg)
{
    Scan *s = arg;
    PyGILState_STATE g = PyGILState_Ensure();
    if (PyErr_CheckSignals() < 0)
        s->interrupted = 1;
    PyGILState_Release(g);
    return s->interrupted;
}

/* Is the rest of the SQL text after the first statement empty (blanks, comments, `;`)? */
static int only_statement(sqlite3 *db, const char *tail)
{
    while (tail != NULL && *tail) {
        sqlite3_stmt *next = NULL;
        const char *rest = NULL;
        if (sqlite3_prepare_v2(db, tail, -1, &next, &rest) != SQLITE_OK)
            return 0;
        if (next != NULL) {
            sqlite3_finalize(next);
            return 0;
        }
        if (rest == tail)
            break;
        tail = rest;
    }
    return 1;
}

/* Runs without the GIL (but for the progress handler): touches no Python object. */
static void scan_run(sqlite3 *db, const char *sql, Scan *s)
{
    sqlite3_stmt *st = NULL;
    const char *tail = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, &tail);
    if (rc != SQLITE_OK || st == NULL) {
        snprintf(s->err, sizeof s->err, "%s", rc != SQLITE_OK ? sqlite3_errmsg(db) : "no statement");
        sqlite3_finalize(st);
        return;
    }
    if (!sqlite3_stmt_readonly(st) || !only_statement(db, tail)) {
        snprintf(s->err, sizeof s->err, "not one read-only statement");
        sqlite3_finalize(st);
        return;
    }
    if (sqlite3_column_count(st) != s->ncols) {
        snprintf(s->err, sizeof s->err, "the query selects %d columns, not %d",
                 sqlite3_column_count(st), s->ncols);
        sqlite3_finalize(st);
        return;
    }
    const int n = s->ncols;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (s->rows == s->cap && scan_grow(s) != 0) {
            s->nomem = 1;
            break;
        }
        const size_t r = s->rows;
        for (int i = 0; i < n; i++) {
            Col *c = &s->cols[i];
            sqlite3_value *v = sqlite3_column_value(st, i);
            int t = sqlite3_value_type(v);
            if (c->kind == 's') {
                if (t != SQLITE_NULL) {
                    const unsigned char *p = t == SQLITE_BLOB ? sqlite3_column_blob(st, i)
                                                              : sqlite3_column_text(st, i);
                    int len = sqlite3_column_bytes(st, i);
                    if ((p == NULL && (len > 0 || t != SQLITE_BLOB)) || text_append(c, p, (size_t)len) != 0) {
                        s->nomem = 1;
                        break;
                    }
                }
                c->v[r] = (int64_t)c->tlen;
            } else if (t == SQLITE_INTEGER) {
                c->v[r] = sqlite3_value_int64(v);
            } else if (t == SQLITE_NULL) {
                c->v[r] = 0;
            } else {
                s->bad_col = i;
                s->bad_type = t;
                sqlite3_finalize(st);
                return;
            }
        }
        if (s->nomem)
            break;
        s->rows = r + 1;
    }
    if (!s->nomem && !s->interrupted && rc != SQLITE_DONE && rc != SQLITE_ROW)
        snprintf(s->err, sizeof s->err, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
}

static PyObject *texts_of(const Col *c, size_t rows)
{
    PyObject *texts = PyList_New((Py_ssize_t)rows);
    int64_t start = 0;
    for (size_t r = 0; texts != NULL && r < rows; r++) {
        int64_t end = c->v[r];
        PyObject *u = PyUnicode_DecodeUTF8(c->txt ? c->txt + start : "", (Py_ssize_t)(end - start), "replace");
        if (u == NULL)
            Py_CLEAR(texts);
        else
            PyList_SET_ITEM(texts, (Py_ssize_t)r, u);
        start = end;
    }
    return texts;
}

static PyObject *Conn_read(Conn *self, PyObject *args)
{
    const char *sql, *kinds;
    int signals = 0;
    if (!PyArg_ParseTuple(args, "ss|p", &sql, &kinds, &signals))
        return NULL;
    const size_t nkinds = strlen(kinds);
    if (self->db == NULL) {
        PyErr_SetString(ScanError, "the connection is closed");
        return NULL;
    }
    if (refused_busy(self))
        return NULL;
    if (nkinds < 1 || nkinds > 32767 || strspn(kinds, "is") != nkinds) {
        PyErr_SetString(ScanError, "kinds: one letter a column, 'i' (integer) or 's' (text)");
        return NULL;
    }
    Scan s;
    memset(&s, 0, sizeof s);
    s.ncols = (int)nkinds;
    s.bad_col = -1;
    s.cols = calloc(nkinds, sizeof(Col));
    if (s.cols == NULL)
        return PyErr_NoMemory();
    for (int i = 0; i < s.ncols; i++)
        s.cols[i].kind = kinds[i];
    self->busy = 1;
    if (signals)
        sqlite3_progress_handler(self->db, PROGRESS_STEPS, scan_progress, &s);
    Py_BEGIN_ALLOW_THREADS
    scan_run(self->db, sql, &s);
    Py_END_ALLOW_THREADS
    if (signals)
        sqlite3_progress_handler(self->db, 0, NULL, NULL);
    self->busy = 0;

    PyObject *out = NULL;
    if (s.interrupted) {
        if (!PyErr_Occurred())
            PyErr_SetString(ScanError, "interrupted");
    } else if (s.nomem) {
        PyErr_NoMemory();
    } else if (s.err[0]) {
        set_error(s.err);
    } else if (s.bad_col >= 0) {
        PyObject *exc = Py_BuildValue("(is)", s.bad_col, type_name(s.bad_type));
        if (exc != NULL) {
            PyErr_SetObject(ScanMismatch, exc);
            Py_DECREF(exc);
        }
    } else {
        PyObject *cols = PyList_New(s.ncols);
        for (int i = 0; cols != NULL && i < s.ncols; i++) {
            Col *c = &s.cols[i];
            PyObject *item;
            if (c->kind == 's') {
                item = texts_of(c, s.rows);
            } else {
                Column *col = PyObject_New(Column, &ColumnType);
                if (col != NULL) {
                    col->len = (Py_ssize_t)s.rows;
                    col->data = NULL;
                    if (s.rows) {
                        int64_t *p = realloc(c->v, s.rows * sizeof(int64_t));   /* the unused tail back */
                        col->data = p ? p : c->v;
                        c->v = NULL;
                    }
                }
                item = (PyObject *)col;
            }
            if (item == NULL)
                Py_CLEAR(cols);
            else
                PyList_SET_ITEM(cols, i, item);
        }
        if (cols != NULL)
            out = Py_BuildValue("(nN)", (Py_ssize_t)s.rows, cols);
    }
    scan_free(&s);
    return out;
}

static PyObject *Conn_interrupt(Conn *self, PyObject *Py_UNUSED(ignored))
{
    /* sqlite3_interrupt is safe from any thread while the connection is open; close() and
       __init__ are refused while it reads, so it is open whenever busy is set */
    if (self->db != NULL && self->busy)
        sqlite3_interrupt(self->db);
    Py_RETURN_NONE;
}

static PyObject *Conn_close(Conn *self, PyObject *Py_UNUSED(ignored))
{
    if (refused_busy(self))
        return NULL;
    if (self->db != NULL) {
        sqlite3_close(self->db);
        self->db = NULL;
    }
    Py_RETURN_NONE;
}

static int Conn_init(Conn *self, PyObject *args, PyObject *kwds)
{
    const char *uri;
    static char *kwlist[] = {"uri", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s", kwlist, &uri))
        return -1;
    if (refused_busy(self))
        return -1;
    if (self->db != NULL) {
        sqlite3_close(self->db);
        self->db = NULL;
    }
    sqlite3 *db = NULL;
    int rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc != SQLITE_OK) {
        set_error(db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return -1;
    }
    self->db = db;
    return 0;
}

static void Conn_dealloc(Conn *self)
{
    if (self->db != NULL)
        sqlite3_close(self->db);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Conn_methods[] = {
    {"read", (PyCFunction)Conn_read, METH_VARARGS,
     "read(sql, kinds, signals=False) -> (rows, [column, ...]): kinds one letter a selected column, "
     "'i' an integer column (a Column of int64, NULL read as 0), 's' text (a list of str, NULL read "
     "as ''); signals: run signal handlers while reading (the main thread's reads)"},
    {"interrupt", (PyCFunction)Conn_interrupt, METH_NOARGS,
     "stop the read running on another thread (it raises Error); nothing when none runs"},
    {"close", (PyCFunction)Conn_close, METH_NOARGS, "close the connection"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ConnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "clef_prof.analyze.read._scan.Conn",
    .tp_doc = "A read-only SQLite connection for one thread at a time.",
    .tp_basicsize = sizeof(Conn),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Conn_init,
    .tp_dealloc = (destructor)Conn_dealloc,
    .tp_methods = Conn_methods,
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_scan",
    .m_doc = "The columns of an SQLite query, read in C without the GIL.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__scan(void)
{
    if (!sqlite3_threadsafe()) {
        PyErr_SetString(PyExc_ImportError, "SQLite was built single-threaded; the C reader needs threads");
        return NULL;
    }
    if (PyType_Ready(&ConnType) < 0 || PyType_Ready(&ColumnType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&scan_module);
    if (m == NULL)
        return NULL;
    ScanError = PyErr_NewException("clef_prof.analyze.read._scan.Error", NULL, NULL);
    ScanMismatch = PyErr_NewException("clef_prof.analyze.read._scan.Mismatch", NULL, NULL);
    if (ScanError == NULL || ScanMismatch == NULL
        || PyModule_AddObjectRef(m, "Error", ScanError) < 0
        || PyModule_AddObjectRef(m, "Mismatch", ScanMismatch) < 0
        || PyModule_AddObjectRef(m, "Conn", (PyObject *)&ConnType) < 0
        || PyModule_AddStringConstant(m, "sqlite_version", sqlite3_libversion()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
