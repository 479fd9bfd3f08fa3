! The adjsnapd Fortran module: libadjsnap's C API (adjsnap/adjsnap.h) through iso_c_binding, with
! Fortran strings and arrays. Every function returns an adjsnap code (adjsnap_ok = 0, otherwise a
! gRPC status code); adjsnap_last_error() says why the calling thread's last call failed.
!
!   use adjsnap
!   type(c_ptr) :: client
!   integer(c_int64_t) :: run
!   rc = adjsnap_connect(client)                        ! or adjsnap_connect(client, "/path/sock")
!   rc = adjsnap_open_run(client, "shot-17", nt, nbytes, adjsnap_float32, run)
!   rc = adjsnap_push(client, run, t, u, nbytes, adjsnap_wait_released)   ! forward, each step
!   rc = adjsnap_fetch(client, run, t, u, nbytes)                        ! backward, each step
!   rc = adjsnap_delete_run(client, "shot-17")
!   call adjsnap_disconnect(client)
!
! Thread-safety: as the C API, every call may come from any thread.
module adjsnap
  use, intrinsic :: iso_c_binding
  implicit none
  private

  integer, parameter, public :: adjsnap_ok = 0, adjsnap_invalid_argument = 3, &
                                adjsnap_deadline_exceeded = 4, &
                                adjsnap_not_found = 5, adjsnap_already_exists = 6, &
                                adjsnap_resource_exhausted = 8, adjsnap_failed_precondition = 9, &
                                adjsnap_unavailable = 14, adjsnap_data_loss = 15
  ! dtype of adjsnap_open_run.
  integer, parameter, public :: adjsnap_bytes = 0, adjsnap_float32 = 1, adjsnap_float64 = 2, &
                                adjsnap_int32 = 3, adjsnap_int64 = 4, adjsnap_uint8 = 5
  ! What adjsnap_push waits for: the buffer being reusable (what a forward pass needs), or the
  ! step being stored in its tier.
  integer, parameter, public :: adjsnap_wait_released = 1, adjsnap_wait_stored = 2

  public :: adjsnap_connect, adjsnap_disconnect, adjsnap_open_run, adjsnap_close_run, &
            adjsnap_delete_run, adjsnap_push, adjsnap_fetch, adjsnap_last_error

  ! adjsnap_run_spec of adjsnap/adjsnap.h, field for field.
  type, bind(c) :: run_spec
    type(c_ptr) :: name = c_null_ptr
    integer(c_int64_t) :: steps = 0
    integer(c_int64_t) :: bytes_per_step = 0
    integer(c_int) :: dtype = 0
    type(c_ptr) :: shape = c_null_ptr
    integer(c_size_t) :: ndim = 0
    type(c_ptr) :: layers = c_null_ptr
    integer(c_int) :: keep = 0
    integer(c_int) :: block_when_full = 0
    integer(c_int) :: codec = 0          ! as adjsnap.h's adjsnap_run_spec.codec: 0 none .. 7 ans
    real(c_double) :: codec_param = 0
    integer(c_int) :: compress_at_ingest = 0
    type(c_ptr) :: job = c_null_ptr
    integer(c_int) :: check_finite = 0
  end type run_spec

  interface
    function c_last_error() bind(c, name="adjsnap_last_error")
      import :: c_ptr
      type(c_ptr) :: c_last_error
    end function c_last_error
    function c_strlen(s) bind(c, name="strlen")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: c_strlen
    end function c_strlen
    function c_connect(socket_path, out) bind(c, name="adjsnap_connect")
      import :: c_ptr, c_int
      type(c_ptr), value :: socket_path
      type(c_ptr) :: out
      integer(c_int) :: c_connect
    end function c_connect
    subroutine c_disconnect(client) bind(c, name="adjsnap_disconnect")
      import :: c_ptr
      type(c_ptr), value :: client
    end subroutine c_disconnect
    function c_open_run(client, spec, run_id) bind(c, name="adjsnap_open_run")
      import :: c_ptr, c_int, c_int64_t, run_spec
      type(c_ptr), value :: client
      type(run_spec) :: spec
      integer(c_int64_t) :: run_id
      integer(c_int) :: c_open_run
    end function c_open_run
    function c_close_run(client, name) bind(c, name="adjsnap_close_run")
      import :: c_ptr, c_int, c_char
      type(c_ptr), value :: client
      character(kind=c_char), dimension(*) :: name
      integer(c_int) :: c_close_run
    end function c_close_run
    function c_delete_run(client, name) bind(c, name="adjsnap_delete_run")
      import :: c_ptr, c_int, c_char
      type(c_ptr), value :: client
      character(kind=c_char), dimension(*) :: name
      integer(c_int) :: c_delete_run
    end function c_delete_run
    function c_push(client, run_id, step, data, bytes, out) bind(c, name="adjsnap_push")
      import :: c_ptr, c_int, c_int64_t, c_size_t
      type(c_ptr), value :: client
      integer(c_int64_t), value :: run_id, step
      type(*), dimension(*), intent(in) :: data
      integer(c_size_t), value :: bytes
      type(c_ptr) :: out
      integer(c_int) :: c_push
    end function c_push
    function c_push_wait_released(push) bind(c, name="adjsnap_push_wait_released")
      import :: c_ptr, c_int
      type(c_ptr), value :: push
      integer(c_int) :: c_push_wait_released
    end function c_push_wait_released
    function c_push_wait_stored(push) bind(c, name="adjsnap_push_wait_stored")
      import :: c_ptr, c_int
      type(c_ptr), value :: push
      integer(c_int) :: c_push_wait_stored
    end function c_push_wait_stored
    function c_push_wait_released_for(push, seconds) &
        bind(c, name="adjsnap_push_wait_released_for")
      import :: c_ptr, c_int, c_double
      type(c_ptr), value :: push
      real(c_double), value :: seconds
      integer(c_int) :: c_push_wait_released_for
    end function c_push_wait_released_for
    function c_push_wait_stored_for(push, seconds) bind(c, name="adjsnap_push_wait_stored_for")
      import :: c_ptr, c_int, c_double
      type(c_ptr), value :: push
      real(c_double), value :: seconds
      integer(c_int) :: c_push_wait_stored_for
    end function c_push_wait_stored_for
    subroutine c_push_free(push) bind(c, name="adjsnap_push_free")
      import :: c_ptr
      type(c_ptr), value :: push
    end subroutine c_push_free
    function c_fetch(client, run_id, step, data, bytes) bind(c, name="adjsnap_fetch")
      import :: c_ptr, c_int, c_int64_t, c_size_t
      type(c_ptr), value :: client
      integer(c_int64_t), value :: run_id, step
      type(*), dimension(*) :: data
      integer(c_size_t), value :: bytes
      integer(c_int) :: c_fetch
    end function c_fetch
  end interface

contains

  ! `s` without its trailing blanks, as a NUL-terminated C string.
  pure function c_string(s) result(c)
    character(*), intent(in) :: s
    character(kind=c_char, len=:), allocatable :: c
    c = trim(s) // c_null_char
  end function c_string

  ! Connects to adjsnapd at `socket` (default: $ADJSNAP_SOCKET, else the default socket).
  integer function adjsnap_connect(client, socket) result(rc)
    type(c_ptr), intent(out) :: client
    character(*), intent(in), optional :: socket
    character(kind=c_char, len=:), allocatable, target :: path
    client = c_null_ptr
    if (present(socket)) then
      path = c_string(socket)
      rc = c_connect(c_loc(path), client)
    else
      rc = c_connect(c_null_ptr, client)
    end if
  end function adjsnap_connect

  subroutine adjsnap_disconnect(client)
    type(c_ptr), intent(inout) :: client
    call c_disconnect(client)
    client = c_null_ptr
  end subroutine adjsnap_disconnect

  ! Opens (or attaches to) run `name` of `steps` steps of `bytes_per_step` bytes; keep
  ! (default .false.: read-once) keeps steps after their fetch, for schedules that read twice.
  integer function adjsnap_open_run(client, name, steps, bytes_per_step, dtype, run_id, keep) &
      result(rc)
    type(c_ptr), intent(in) :: client
    character(*), intent(in) :: name
    integer(c_int64_t), intent(in) :: steps, bytes_per_step
    integer, intent(in) :: dtype
    integer(c_int64_t), intent(out) :: run_id
    logical, intent(in), optional :: keep
    character(kind=c_char, len=:), allocatable, target :: cname
    type(run_spec) :: spec
    cname = c_string(name)
    spec%name = c_loc(cname)
    spec%steps = steps
    spec%bytes_per_step = bytes_per_step
    spec%dtype = int(dtype, c_int)
    if (present(keep)) then
      if (keep) spec%keep = 1
    end if
    run_id = 0
    rc = c_open_run(client, spec, run_id)
  end function adjsnap_open_run

  integer function adjsnap_close_run(client, name) result(rc)
    type(c_ptr), intent(in) :: client
    character(*), intent(in) :: name
    rc = c_close_run(client, c_string(name))
  end function adjsnap_close_run

  integer function adjsnap_delete_run(client, name) result(rc)
    type(c_ptr), intent(in) :: client
    character(*), intent(in) :: name
    rc = c_delete_run(client, c_string(name))
  end function adjsnap_delete_run

  ! Pushes `bytes` bytes of `data` as step `step` and waits until `wait` holds:
  ! adjsnap_wait_released (data may be overwritten) or adjsnap_wait_stored (in its tier). At most
  ! `timeout` seconds when given (else the client's limit, 600 s or $ADJSNAP_WAIT_TIMEOUT): past
  ! it adjsnap_deadline_exceeded, adjsnap_last_error() says what adjsnapd reports the push waits for,
  ! and the push goes on with `data` in use until the client disconnects.
  integer function adjsnap_push(client, run_id, step, data, bytes, wait, timeout) result(rc)
    type(c_ptr), intent(in) :: client
    integer(c_int64_t), intent(in) :: run_id, step, bytes
    type(*), dimension(*), intent(in) :: data
    integer, intent(in) :: wait
    real(c_double), intent(in), optional :: timeout
    type(c_ptr) :: push
    rc = c_push(client, run_id, step, data, int(bytes, c_size_t), push)
    if (rc /= adjsnap_ok) return
    if (present(timeout)) then
      if (wait == adjsnap_wait_stored) then
        rc = c_push_wait_stored_for(push, timeout)
      else
        rc = c_push_wait_released_for(push, timeout)
      end if
    else if (wait == adjsnap_wait_stored) then
      rc = c_push_wait_stored(push)
    else
      rc = c_push_wait_released(push)
    end if
    call c_push_free(push)
  end function adjsnap_push

  ! Fetches step `step` (exactly bytes_per_step bytes) into `data`.
  integer function adjsnap_fetch(client, run_id, step, data, bytes) result(rc)
    type(c_ptr), intent(in) :: client
    integer(c_int64_t), intent(in) :: run_id, step, bytes
    type(*), dimension(*) :: data
    rc = c_fetch(client, run_id, step, data, int(bytes, c_size_t))
  end function adjsnap_fetch

  ! Why the calling thread's last call failed ("" if it did not).
  function adjsnap_last_error() result(message)
    character(:), allocatable :: message
    type(c_ptr) :: p
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    p = c_last_error()
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate (character(n) :: message)
    do i = 1, n
      message(i:i) = chars(i)
    end do
  end function adjsnap_last_error

end module adjsnap
