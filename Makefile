# tokenloom build. `make` builds build/tokenloom and build/libtokenloom.a; `make test` runs every
# test and ends with "N passed, N failed". Sources are found by globbing, so a new module or test
# needs no edit here. SIMD variants (src/kernels/x86/avx2*.c, avx512*.c) get their own -m flags
# and are chosen at run time; everything else is built for the baseline ISA.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2
SAN      ?=
ARCH     := $(shell uname -m)

PKGS      := libpcre2-8 jansson libevent libevent_pthreads grpc libprotobuf-c

# On a fresh machine, install the Debian packages first (scripts/install-deps.sh is idempotent;
# as non-root it prints the one apt-get line needed and the build stops). Building and `make
# run` need the build set only; the test goals need the test set too (cmocka, node, pytest).
DEPS_SET := $(if $(filter test check tsan bench %/tests/%,$(MAKECMDGOALS)),test,build)
DEPS_OK  := $(shell pkg-config --exists $(PKGS) $(if $(filter test,$(DEPS_SET)),cmocka) \
              2>/dev/null && command -v protoc-c >/dev/null && echo ok)
ifneq ($(filter clean lint format,$(MAKECMDGOALS)),)
DEPS_OK  := ok
endif
ifneq ($(DEPS_OK),ok)
$(info tokenloom: installing missing Debian packages (scripts/install-deps.sh $(DEPS_SET)))
DEPS_RC := $(shell sh scripts/install-deps.sh $(DEPS_SET) >&2; echo $$?)
ifneq ($(DEPS_RC),0)
$(error missing Debian packages: run the apt-get line printed above as root)
endif
endif
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CMOCKA_CFLAGS := $(shell pkg-config --cflags cmocka 2>/dev/null)
CMOCKA_LIBS   := $(shell pkg-config --libs cmocka 2>/dev/null)

WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wvla
# gcc's -Wformat-truncation flags every bounded snprintf; clang has no such option.
WARN     += $(shell $(CC) -Werror -Wno-format-truncation -E -x c /dev/null >/dev/null 2>&1 && echo -Wno-format-truncation)
CFLAGS   ?=
ifeq ($(WERROR),1)
WARN     += -Werror
endif
CFLAGS   += -std=c11 -D_GNU_SOURCE $(OPT) -g $(WARN) -fno-strict-aliasing -pthread \
            -Iinclude -Isrc -I$(BUILD)/gen $(PKG_CFLAGS) -MMD -MP $(SAN)
LDFLAGS  += -pthread $(SAN)
LDLIBS   := $(PKG_LIBS) -lm

# The Vulkan backend (src/gpu) is built when the Vulkan headers (pkg-config vulkan) and glslc
# are there; `make VULKAN=0` leaves it out. The loader is opened with dlopen at run time, so the
# binary links only libdl and still runs on the CPU where no loader is installed.
VULKAN   ?= $(shell pkg-config --exists vulkan 2>/dev/null && command -v glslc >/dev/null && echo 1)
ifeq ($(VULKAN),1)
CFLAGS   += -DTL_HAVE_VULKAN $(shell pkg-config --cflags vulkan 2>/dev/null)
LDLIBS   += -ldl
endif

ALL_SRC  := $(shell find src -name '*.c' | sort)
ifneq ($(ARCH),x86_64)
ALL_SRC  := $(filter-out src/kernels/x86/%,$(ALL_SRC))
endif
CLI_SRC  := $(filter src/cli/%,$(ALL_SRC))
# The load generator (an HTTP client) is its own archive, linked into the CLI and the tests,
# so that the server library carries no client code.
LOADGEN_SRC := $(filter src/loadgen/%,$(ALL_SRC))
LIB_SRC  := $(filter-out src/cli/% src/loadgen/%,$(ALL_SRC))
# The gRPC front's protobuf code is generated from proto/ at build time (never committed).
PROTO_H  := $(BUILD)/gen/grpc_service.pb-c.h
PROTO_OBJ := $(BUILD)/gen/grpc_service.pb-c.o
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(PROTO_OBJ)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
LOADGEN_OBJ := $(LOADGEN_SRC:%.c=$(BUILD)/%.o)
LIBS_A   := $(BUILD)/libtlloadgen.a $(BUILD)/libtokenloom.a

TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni

.PHONY: format all test check tsan lint clean bench run shlib
MODEL ?= ../shared/models/stories260K.gguf
all: $(BUILD)/tokenloom $(LIBS_A)

$(BUILD)/libtokenloom.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libtlloadgen.a: $(LOADGEN_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/tokenloom: $(CLI_OBJ) $(LIBS_A)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(LIBS_A) $(LDLIBS)

$(BUILD)/src/kernels/x86/avx2%.o: src/kernels/x86/avx2%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -c $< -o $@

$(BUILD)/src/kernels/x86/avx512%.o: src/kernels/x86/avx512%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -c $< -o $@

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(@D)
	protoc-c --c_out=$(@D) -Iproto $<

$(PROTO_OBJ): $(BUILD)/gen/grpc_service.pb-c.c $(PROTO_H)
	$(CC) $(CFLAGS) -w -c $< -o $@

# Everything may include the generated header; -MMD tracks it after the first build.
$(LIB_SRC:%.c=$(BUILD)/%.o) $(CLI_OBJ) $(TEST_BIN) $(BENCH_BIN): | $(PROTO_H)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# The dashboard page (src/server/dashboard/index.html) is embedded into the server as a C array
# generated at build time (never committed).
DASHBOARD_H := $(BUILD)/gen/dashboard_html.h
$(DASHBOARD_H): src/server/dashboard/index.html src/server/dashboard/embed.sh
	@mkdir -p $(@D)
	sh src/server/dashboard/embed.sh tl_dashboard_html $< $@
$(BUILD)/src/server/dashboard.o $(BUILD)/pic/src/server/dashboard.o: $(DASHBOARD_H)

# The GPU shaders (src/gpu/shaders/*.comp) are compiled to SPIR-V with glslc and embedded as C
# arrays in $(BUILD)/gen/gpu_shaders.h (generated, never committed). A shader that does not
# compile fails the build.
ifeq ($(VULKAN),1)
GPU_COMP := $(sort $(wildcard src/gpu/shaders/*.comp))
GPU_SPV  := $(GPU_COMP:src/gpu/shaders/%.comp=$(BUILD)/gen/shaders/%.spv)
GPU_SHADERS_H := $(BUILD)/gen/gpu_shaders.h
$(BUILD)/gen/shaders/%.spv: src/gpu/shaders/%.comp
	@mkdir -p $(@D)
	glslc --target-env=vulkan1.1 -O -Werror -o $@ $<
$(GPU_SHADERS_H): $(GPU_SPV) src/gpu/embed_shaders.sh src/server/dashboard/embed.sh
	sh src/gpu/embed_shaders.sh $@ $(GPU_SPV)
$(BUILD)/src/gpu/shaders.o $(BUILD)/pic/src/gpu/shaders.o: $(GPU_SHADERS_H)
endif

# `tokenloom version` and /metrics report the git revision and build flags (front/build_info.c);
# the stamp file changes (and the object is rebuilt) only when they do.
GIT_REV     := $(or $(shell git rev-parse --short=7 HEAD 2>/dev/null),unknown)$(shell \
               git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
BUILD_FLAGS := $(strip $(OPT) $(SAN))
VERSION_STAMP := $(BUILD)/version.stamp
$(shell mkdir -p $(BUILD) && echo '$(GIT_REV) $(BUILD_FLAGS)' | cmp -s - $(VERSION_STAMP) || \
        echo '$(GIT_REV) $(BUILD_FLAGS)' > $(VERSION_STAMP))
$(BUILD)/src/front/build_info.o: src/front/build_info.c $(VERSION_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DTL_GIT_REV='"$(GIT_REV)"' -DTL_BUILD_FLAGS='"$(BUILD_FLAGS)"' -c $< -o $@
$(BUILD)/pic/src/front/build_info.o: src/front/build_info.c $(VERSION_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -DTL_GIT_REV='"$(GIT_REV)"' -DTL_BUILD_FLAGS='"$(BUILD_FLAGS)"' -c $< -o $@

# The shared library for the Python binding (python/tokenloom, ctypes): the same sources built
# again with -fPIC into $(BUILD)/pic, so the static library and the executable keep their code.
PIC_OBJ := $(LIB_SRC:%.c=$(BUILD)/pic/%.o) $(BUILD)/pic/gen/grpc_service.pb-c.o
$(BUILD)/libtokenloom.so: $(PIC_OBJ)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/pic/gen/grpc_service.pb-c.o: $(BUILD)/gen/grpc_service.pb-c.c $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -w -c $< -o $@

$(LIB_SRC:%.c=$(BUILD)/pic/%.o): | $(PROTO_H)

$(BUILD)/pic/src/kernels/x86/avx2%.o: src/kernels/x86/avx2%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC $(AVX2_FLAGS) -c $< -o $@

$(BUILD)/pic/src/kernels/x86/avx512%.o: src/kernels/x86/avx512%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC $(AVX512_FLAGS) -c $< -o $@

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -c $< -o $@

shlib: $(BUILD)/libtokenloom.so

$(BUILD)/tests/%: tests/unit/%.c $(LIBS_A) tests/unit/tl_test.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CMOCKA_CFLAGS) -Itests/unit -o $@ $< $(LIBS_A) \
	    $(LDFLAGS) $(CMOCKA_LIBS) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libtokenloom.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libtokenloom.a $(LDFLAGS) $(LDLIBS)

bench: $(BENCH_BIN) $(BUILD)/tokenloom

# tests/models: the engine side of the NumPy reference tests (a helper, not a test: tests/run.sh
# runs tests/models/run.sh, which calls it).
MODEL_TOOLS := $(BUILD)/tests/models/dump_logits $(BUILD)/tests/models/dump_embed
$(BUILD)/tests/models/%: tests/models/%.c $(LIBS_A)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIBS_A) $(LDFLAGS) $(LDLIBS)

# The README's test command. tests/run.sh runs every unit binary and every script test (TAP) and
# prints the totals; its exit code is 0 only when all pass.
# The Python binding's tests need the shared library; sanitizer builds skip it (an ASan library
# cannot be loaded into an uninstrumented python3).
test: all $(TEST_BIN) $(MODEL_TOOLS) $(if $(SAN),,$(BUILD)/libtokenloom.so)
	@BUILD=$(BUILD) sh tests/run.sh

# The README's main command: the server on the default model (MODEL=path picks another).
# Without the shared test data (a plain clone), it says where to get a model instead of failing
# inside the server.
run: all
	@if [ ! -r "$(MODEL)" ]; then \
	    echo "tokenloom: no model at $(MODEL)."; \
	    echo "  The default model comes from the shared test-data folder next to the checkout"; \
	    echo "  (../shared, see README.md 'Test data'). Without it, download a GGUF model (README"; \
	    echo "  'Serve a real chat model') and run: make run MODEL=path/to/model.gguf"; \
	    exit 2; \
	fi
	./$(BUILD)/tokenloom serve -m $(MODEL) $(ARGS)

# Sanitizer tier: the same tests under ASan+UBSan in a separate build folder.
# Leaks inside the Vulkan loader and driver are suppressed by module (tests/lsan.supp).
# Left out of it: test_dockerfile.py (it checks the release binary's shared libraries, and an ASan
# binary needs libasan).
check:
	TL_TEST_SKIP="test_dockerfile.py" \
	    LSAN_OPTIONS="suppressions=$(CURDIR)/tests/lsan.supp print_suppressions=0 $(LSAN_OPTIONS)" \
	    $(MAKE) BUILD=build-san OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" test

# ThreadSanitizer tier: the multi-threaded tests (engine, scheduler, server: loop thread, engine
# thread and inbox; compute pool) in their own build folder. A race report fails the test.
TSAN_TESTS := $(filter-out %_fuzz,$(filter test_engine% test_sched% test_server%,\
              $(TEST_SRC:tests/unit/%.c=%)))
tsan:
	$(MAKE) BUILD=build-tsan OPT=-O1 SAN="-fsanitize=thread" build-tsan/tokenloom \
	    $(TSAN_TESTS:%=build-tsan/tests/%)
	@BUILD=build-tsan TL_TEST_ONLY="$(TSAN_TESTS)" \
	    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 $(TSAN_OPTIONS)" sh tests/run.sh

LINT_FILES = $(ALL_SRC) $(shell find src include -name '*.h')

lint:
	clang-format --dry-run --Werror $(LINT_FILES)

# Rewrites every source in place to the house format (.clang-format); run before committing.
format:
	clang-format -i $(LINT_FILES)

clean:
	rm -rf build build-san build-tsan build-clang

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
