/* clef_prof.analyze._scan: the columns of an SQLite query, read in C without the GIL.
 *
 * Why a reader of our own: through ADBC a big export costs about twice the C scan of the same
 * values (Arrow validity bitmaps set one bit a value, type inference, a mutex per column call;
 * docs/speed.md). This loop steps the statement and writes each integer straight into a growing
 * int64 buffer (realloc doubles it; glibc moves big blocks with mremap, no copy): the column's
 * value and its type read once, on a connection opened without mutexes (one connection per
 * thread, enforced by `busy`, so the unprotected sqlite3_value is safe to read; reading it once
 * costs about a quarter less than sqlite3_column_type + sqlite3_column_int64, measured). The GIL
 * is released for the whole query, so reader threads run side by side.
 *
 * Conn(uri).read(sql, kinds) -> (rows, [column, ...]), kinds one letter a selected column:
 * 'i' an integer column, its values as native int64 (NULL read as 0) in a buffer NumPy reads
 * without a copy; 's' a text column, a list of str (NULL read as '', bytes that are not UTF-8
 * as U+FFFD). A REAL, TEXT or BLOB value in an integer column raises Mismatch(column index,
 * type name); an SQLite failure raises Error(message). Optional: built when a C compiler and
 * sqlite3.h are there; without it clef-prof reads the same values through ADBC or sqlite3. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COLS 64
#define FIRST_ROWS 4096

static PyObject *ScanError;
static PyObject *ScanMismatch;

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    int busy;
} Conn;

/* One column's values, owned here and lent through the buffer protocol: NumPy views them
 * without a copy, and the memory is freed when the last view goes. */
typedef struct {
    PyObject_HEAD
    int64_t *data;
    Py_ssize_t len;          /* values */
    Py_ssize_t exports;
} Column;

static int Column_getbuffer(Column *self, Py_buffer *view, int flags)
{
    static Py_ssize_t itemsize = sizeof(int64_t);
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->data ? (void *)self->data : (void *)&itemsize,
                          self->len * itemsize, 0, flags) < 0)
        return -1;
    if (flags & PyBUF_FORMAT)
        view->format = "q";
    if (flags & PyBUF_ND) {
        view->ndim = 1;
        view->shape = &self->len;
        view->itemsize = itemsize;
    }
    if (flags & PyBUF_STRIDES)
        view->strides = &view->itemsize;
    self->exports++;
    return 0;
}

static void Column_releasebuffer(Column *self, Py_buffer *Py_UNUSED(view))
{
    self->exports--;
}

static void Column_dealloc(Column *self)
{
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Column_as_buffer = {
    (getbufferproc)Column_getbuffer,
    (releasebufferproc)Column_releasebuffer,
};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "clef_prof.analyze._scan.Column",
    .tp_doc = "One column's int64 values (a buffer: read it with numpy.frombuffer).",
    .tp_basicsize = sizeof(Column),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Column_dealloc,
    .tp_as_buffer = &Column_as_buffer,
};

typedef struct {
    int64_t *cols[MAX_COLS]; /* an integer column's values; a text column's end offsets in txt */
    char *txt[MAX_COLS];     /* a text column's UTF-8 bytes, back to back */
    size_t tlen[MAX_COLS], tcap[MAX_COLS];
    char kinds[MAX_COLS];    /* 'i' integer, 's' text */
    size_t rows, cap;
    int ncols;
    int bad_col, bad_type;   /* the first value that is not an integer or NULL */
    int nomem;
    char err[512];           /* SQLite's message, empty when none */
} Scan;

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
    for (int i = 0; i < s->ncols; i++) {
        free(s->cols[i]);
        free(s->txt[i]);
        s->cols[i] = NULL;
        s->txt[i] = NULL;
    }
}

static int text_append(Scan *s, int i, const unsigned char *p, size_t n)
{
    if (s->tlen[i] + n > s->tcap[i]) {
        size_t cap = s->tcap[i] ? s->tcap[i] : 4096;
        while (cap < s->tlen[i] + n) {
            if (cap > ((size_t)PY_SSIZE_T_MAX) / 2)
                return -1;
            cap *= 2;
        }
        char *q = realloc(s->txt[i], cap);
        if (q == NULL)
            return -1;
        s->txt[i] = q;
        s->tcap[i] = cap;
    }
    if (n)
        memcpy(s->txt[i] + s->tlen[i], p, n);
    s->tlen[i] += n;
    return 0;
}

static int scan_grow(Scan *s)
{
    size_t cap = s->cap ? s->cap * 2 : FIRST_ROWS;
    if (cap > ((size_t)PY_SSIZE_T_MAX) / sizeof(int64_t))
        return -1;
    for (int i = 0; i < s->ncols; i++) {
        int64_t *p = realloc(s->cols[i], cap * sizeof(int64_t));
        if (p == NULL)
            return -1;
        s->cols[i] = p;
    }
    s->cap = cap;
    return 0;
}

/* Runs without the GIL: touches no Python object. */
static void scan_run(sqlite3 *db, const char *sql, int sql_len, Scan *s)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, sql_len, &st, NULL);
    if (rc != SQLITE_OK || st == NULL) {
        snprintf(s->err, sizeof s->err, "%s", rc != SQLITE_OK ? sqlite3_errmsg(db) : "no statement");
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
            sqlite3_value *v = sqlite3_column_value(st, i);
            int t = sqlite3_value_type(v);
            if (s->kinds[i] == 's') {
                /* any value as its text (NULL as ''; a blob's bytes, decoded later) */
                if (t != SQLITE_NULL) {
                    const unsigned char *p = t == SQLITE_BLOB ? sqlite3_column_blob(st, i)
                                                              : sqlite3_column_text(st, i);
                    int len = sqlite3_column_bytes(st, i);
                    if ((p == NULL && len > 0) || text_append(s, i, p, (size_t)len) != 0) {
                        s->nomem = 1;
                        break;
                    }
                }
                s->cols[i][r] = (int64_t)s->tlen[i];
            } else if (t == SQLITE_INTEGER) {
                s->cols[i][r] = sqlite3_value_int64(v);
            } else if (t == SQLITE_NULL) {
                s->cols[i][r] = 0;
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
    if (!s->nomem && rc != SQLITE_DONE)
        snprintf(s->err, sizeof s->err, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
}

static PyObject *Conn_read(Conn *self, PyObject *args)
{
    const char *sql, *kinds;
    Py_ssize_t sql_len, nkinds;
    if (!PyArg_ParseTuple(args, "s#s#", &sql, &sql_len, &kinds, &nkinds))
        return NULL;
    const int ncols = (int)(nkinds > MAX_COLS ? 0 : nkinds);
    if (self->db == NULL) {
        PyErr_SetString(ScanError, "the connection is closed");
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(ScanError, "the connection is reading on another thread");
        return NULL;
    }
    if (ncols < 1 || sql_len > INT_MAX || strspn(kinds, "is") != (size_t)nkinds) {
        PyErr_Format(PyExc_ValueError, "kinds: 1 to %d of 'i' (integer) or 's' (text)", MAX_COLS);
        return NULL;
    }
    Scan s;
    memset(&s, 0, sizeof s);
    s.ncols = ncols;
    memcpy(s.kinds, kinds, (size_t)ncols);
    s.bad_col = -1;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    scan_run(self->db, sql, (int)sql_len, &s);
    Py_END_ALLOW_THREADS
    self->busy = 0;

    PyObject *out = NULL;
    if (s.nomem) {
        PyErr_NoMemory();
    } else if (s.err[0]) {
        PyErr_SetString(ScanError, s.err);
    } else if (s.bad_col >= 0) {
        PyObject *exc = Py_BuildValue("(is)", s.bad_col, type_name(s.bad_type));
        if (exc != NULL) {
            PyErr_SetObject(ScanMismatch, exc);
            Py_DECREF(exc);
        }
    } else {
        PyObject *cols = PyList_New(ncols);
        for (int i = 0; cols != NULL && i < ncols; i++) {
            if (s.kinds[i] == 's') {
                PyObject *texts = PyList_New((Py_ssize_t)s.rows);
                int64_t start = 0;
                for (size_t r = 0; texts != NULL && r < s.rows; r++) {
                    int64_t end = s.cols[i][r];
                    PyObject *u = PyUnicode_DecodeUTF8(s.txt[i] ? s.txt[i] + start : "",
                                                       (Py_ssize_t)(end - start), "replace");
                    if (u == NULL)
                        Py_CLEAR(texts);
                    else
                        PyList_SET_ITEM(texts, (Py_ssize_t)r, u);
                    start = end;
                }
                if (texts == NULL)
                    Py_CLEAR(cols);
                else
                    PyList_SET_ITEM(cols, i, texts);
                continue;
            }
            Column *c = PyObject_New(Column, &ColumnType);
            if (c == NULL) {
                Py_CLEAR(cols);
                break;
            }
            c->data = NULL;
            c->len = (Py_ssize_t)s.rows;
            c->exports = 0;
            if (s.rows) {
                int64_t *p = realloc(s.cols[i], s.rows * sizeof(int64_t));   /* the unused tail back */
                c->data = p ? p : s.cols[i];
                s.cols[i] = NULL;
            }
            PyList_SET_ITEM(cols, i, (PyObject *)c);
        }
        if (cols != NULL) {
            out = Py_BuildValue("(nN)", (Py_ssize_t)s.rows, cols);
        }
    }
    scan_free(&s);
    return out;
}

static PyObject *Conn_close(Conn *self, PyObject *Py_UNUSED(ignored))
{
    if (self->busy) {
        PyErr_SetString(ScanError, "the connection is reading on another thread");
        return NULL;
    }
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
    if (self->busy) {
        PyErr_SetString(ScanError, "the connection is reading on another thread");
        return -1;
    }
    if (self->db != NULL) {
        sqlite3_close(self->db);
        self->db = NULL;
    }
    sqlite3 *db = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK) {
        PyErr_SetString(ScanError, db ? sqlite3_errmsg(db) : "out of memory");
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
     "read(sql, kinds) -> (rows, [column, ...]): kinds one letter a selected column, 'i' an "
     "integer column (a Column of int64, NULL read as 0), 's' text (a list of str, NULL read as '')"},
    {"close", (PyCFunction)Conn_close, METH_NOARGS, "close the connection"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ConnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "clef_prof.analyze._scan.Conn",
    .tp_doc = "A read-only SQLite connection for one thread at a time.",
    .tp_basicsize = sizeof(Conn),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Conn_init,
    .tp_dealloc = (destructor)Conn_dealloc,
    .tp_methods = Conn_methods,
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT, "_scan",
    "Integer columns of an SQLite query, read in C without the GIL.", -1, NULL,
};

PyMODINIT_FUNC PyInit__scan(void)
{
    if (PyType_Ready(&ConnType) < 0 || PyType_Ready(&ColumnType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&scan_module);
    if (m == NULL)
        return NULL;
    ScanError = PyErr_NewException("clef_prof.analyze._scan.Error", NULL, NULL);
    ScanMismatch = PyErr_NewException("clef_prof.analyze._scan.Mismatch", NULL, NULL);
    Py_INCREF(&ConnType);
    if (ScanError == NULL || ScanMismatch == NULL
        || PyModule_AddObject(m, "Error", ScanError) < 0
        || PyModule_AddObject(m, "Mismatch", ScanMismatch) < 0
        || PyModule_AddObject(m, "Conn", (PyObject *)&ConnType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddStringConstant(m, "sqlite_version", sqlite3_libversion());
    return m;
}
