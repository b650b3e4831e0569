/* tenure's C runtime module: the files of this directory compiled as one
 * translation unit, once per machine and tenure version
 * (tenure/linkers/c/runtime.py builds it through the disk cache).
 *
 * Its module (named TN_RUNTIME_NAME, which carries the digest of the sources)
 * has the FastCall and Schedule types, `run_steps` (a loop's steps, src/loop.c)
 * and `_C_API`, a capsule holding the table of function pointers that graph
 * modules call (include/tenure_runtime.h).
 *
 * runtime.py puts these definitions in front of the sources:
 *   TN_RUNTIME_DIGEST   the sources' digest, as a C string
 *   TN_RUNTIME_NAME     the module's name, as a C string
 *   TN_RUNTIME_INIT     PyInit_<the module's name>
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <numpy/arrayobject.h>

#define TN_RUNTIME_BUILD
#include "tenure_runtime.h"
#include "scalar_errors.h"
#include "vector_math.h"

#include "axes.c"
#include "elemwise.c"
#include "schedule.c"
#include "reduce.c"
#include "views.c"
#include "shapes.c"
#include "advanced.c"
#include "subtensor.c"
#include "fastcall.c"
#include "blas.c.src"
#include "nnet.c.src"
#include "conv.c.src"
#include "pool.c.src"
#include "interpret.c"
#include "loop.c"
#include "random.c"
#include "random_sequential.c"
#include "random_step.c"

static const tn_runtime_api tn_api = {
    .abi = TN_RUNTIME_ABI,
    .digest = TN_RUNTIME_DIGEST,
    .interruptible_flag = tn_interruptible_flag,
    .ew_run = tn_ew_run,
    .shape_tuple = tn_shape_tuple,
    .omp_usable = tn_omp_usable,
    .vw_as_array = tn_vw_as_array,
    .vw_read_int = tn_vw_read_int,
    .vw_scalar = tn_vw_scalar,
    .vw_int_index = tn_vw_int_index,
    .vw_slice = tn_vw_slice,
    .vw_view = tn_vw_view,
    .vw_shape_str = tn_vw_shape_str,
    .st_broadcast = tn_st_broadcast,
    .st_value = tn_st_value,
    .nn_check = tn_nn_check,
    .nn_run = tn_nn_run,
    .rd_broadcast = tn_rd_broadcast,
    .rd_run = tn_rd_run,
    .cl_overlap = tn_cl_overlap,
    .cl_unsafe_overlap = tn_cl_unsafe_overlap,
    .cl_array = tn_cl_array,
    .cl_planned = tn_cl_planned,
    .cl_broadcast = tn_cl_broadcast,
    .cl_output = tn_cl_output,
    .cl_py_step = tn_cl_py_step,
    .cl_clear = tn_cl_clear,
    .cl_free = tn_cl_free,
    .cl_take = tn_cl_take,
    .cl_take_planned = tn_cl_take_planned,
    .blas_init = tn_blas_init,
    .bl_check = tn_bl_check,
    .bl_check_out = tn_bl_check_out,
    .bl_private = tn_bl_private,
    .bl_broadcast2 = tn_bl_broadcast2,
    .mm_shape = tn_mm_shape,
    .mm_run = tn_mm_run,
    .gemm = tn_gemm,
    .conv_shape = tn_conv_shape,
    .conv_run = tn_conv_run,
    .pool_shape = tn_pool_shape,
    .pool_run = tn_pool_run,
    .cl_commit = tn_cl_commit,
    .cl_restore = tn_cl_restore,
    .rng_step = tn_rng_step,
};

static struct PyModuleDef tn_runtime_module = {
    PyModuleDef_HEAD_INIT, TN_RUNTIME_NAME, "tenure's C runtime (see tenure.linkers.c.runtime)",
    -1, tn_loop_methods, NULL, NULL, NULL, NULL
};

/* tn_main_thread_ident: threading.main_thread()'s (this module may be
 * imported on any thread: a Dask worker's first task). */
static int tn_find_main_thread(void)
{
    PyObject *threading = PyImport_ImportModule("threading"), *main = NULL, *ident = NULL;
    if (threading != NULL)
        main = PyObject_CallMethod(threading, "main_thread", NULL);
    if (main != NULL)
        ident = PyObject_GetAttrString(main, "ident");
    if (ident != NULL)
        tn_main_thread_ident = PyLong_AsUnsignedLong(ident);
    Py_XDECREF(threading);
    Py_XDECREF(main);
    Py_XDECREF(ident);
    return ident == NULL || PyErr_Occurred() ? -1 : 0;
}

PyMODINIT_FUNC TN_RUNTIME_INIT(void)
{
    PyObject *module, *capsule;
    import_array();
    if (tn_find_main_thread() < 0)
        return NULL;
    if (tn_fastcall_ready() < 0 || PyType_Ready(&ScheduleType) < 0)
        return NULL;
    module = PyModule_Create(&tn_runtime_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&FastCallType);
    if (PyModule_AddObject(module, "FastCall", (PyObject *)&FastCallType) < 0) {
        Py_DECREF(&FastCallType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&ScheduleType);
    if (PyModule_AddObject(module, "Schedule", (PyObject *)&ScheduleType) < 0) {
        Py_DECREF(&ScheduleType);
        Py_DECREF(module);
        return NULL;
    }
    capsule = PyCapsule_New((void *)&tn_api, TN_RUNTIME_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(module, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
